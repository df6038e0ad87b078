"""The mutable per-worker arena of session states: one preallocated tensor, updated in place.

The immutable API (:mod:`memstack.operators.session_state`) is the reference; the arena is its
fast twin for a worker that holds many sessions. All sessions live in one tensor
``sums (capacity, N_HEADS, dim + 1, 2 * dim + 1)``; an update of many sessions is one batched
matmul whose products are added in place (``baddbmm_`` on a contiguous run of slots, else
``index_add_``), with no per-session copies. A session leaves and enters the arena as a
:class:`SessionSums` (fixed size: the sums, two times and the per-head item counts), which the
codec turns into changelog bytes (:func:`memstack.operators.session_state.codec.snapshot_sums`).

Terms are the same as the reference's: ``c_i [k_i; 1] [k_i, v_i, 1]ᵀ`` with
``c_i = w_i γ^(t_ref − t_i)`` against the slot's reference time on the same grid, so the arena
and the reference agree to rounding (tested). The arena keeps no per-item table: idempotence is
the caller's (log positions, see ``pipelines/session_state/table.py``), and decoding uses
candidate values fetched from the stores (:func:`~memstack.operators.session_state.score_values`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from memstack.foundation.errors import MemstackError
from memstack.operators.session_state import (
    StateConfig,
    _grid_ref,
    _padded,
    canonical,
    codes,
)
from memstack.operators.session_state.codes import CodeRing, RingConfig
from memstack.operators.session_state.keys import N_HEADS

logger = logging.getLogger(__name__)


class StateConfigError(MemstackError, ValueError):
    """A stored session state was built with another config than the worker keeps (the default
    changed: d = 128 sums became d = 8 sums and a code ring in issue #35). The states are
    derived from the log: rebuild them by running the worker on a fresh home, which reads the
    log from its start (docs/session-state.md, "Compatibility")."""


class ArenaFullError(MemstackError):
    """Every slot of the arena holds a session. Evict idle sessions (``evict``) or give the
    arena a larger capacity; evicted sessions are restored from their snapshots when needed."""


@dataclass(frozen=True)
class SessionSums:
    """One session's fixed-size state: what a snapshot holds and what reads use.

    ``sums`` is canonical (see :func:`canonical`); ``counts`` is the number of items per head
    (a head whose count drops to 0 is reset to exact zeros); ``marks`` is the caller's
    bookkeeping (e.g. the next log offset per partition), carried along opaquely. ``ring``:
    the session's latest turns as codes (:mod:`~memstack.operators.session_state.codes`), or
    None for a state kept without one (or snapshotted before rings existed).
    """

    config: StateConfig
    sums: torch.Tensor  # (N_HEADS, dim + 1, 2 * dim + 1)
    ref_time: float
    last_time: float
    counts: tuple[int, ...]
    marks: Mapping[str, int] = field(default_factory=dict)
    ring: CodeRing | None = None

    def sums_at(self, t: float | None = None) -> torch.Tensor:
        """The sums decayed to log time ``t`` (default: the latest)."""
        at = self.last_time if t is None else t
        if not math.isfinite(at):
            return self.sums.clone()
        return self.sums * math.exp(-self.config.rate * (at - self.ref_time))


@dataclass(frozen=True)
class Terms:
    """Items for the arena: slot, head, projected unit key/value, log time, weight (m rows)."""

    slots: torch.Tensor  # (m,) int64
    heads: torch.Tensor  # (m,) int64
    keys: torch.Tensor  # (m, dim)
    values: torch.Tensor  # (m, dim)
    times: torch.Tensor  # (m,) float64
    weights: torch.Tensor  # (m,) float64

    def __len__(self) -> int:
        return int(self.slots.shape[0])


class StateArena:
    """Many sessions' sums in one tensor; slots are assigned by session key. With a ring
    config, each slot also holds its session's code ring (one small object per slot)."""

    def __init__(self, config: StateConfig, capacity: int, ring: RingConfig | None = None
                 ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        d = config.dim
        self.config = config
        self.ring_config = ring
        self.capacity = capacity
        self.rings: list[CodeRing | None] = [self._empty_ring() for _ in range(capacity)]
        self.sums = torch.zeros(capacity, N_HEADS, d + 1, 2 * d + 1, dtype=config.torch_dtype)
        self.ref = torch.zeros(capacity, dtype=torch.float64)
        self.last = torch.full((capacity,), -math.inf, dtype=torch.float64)
        self.counts = torch.zeros(capacity, N_HEADS, dtype=torch.int64)
        self.marks: list[dict[str, int]] = [{} for _ in range(capacity)]
        self._slots: dict[str, int] = {}
        self._free = list(range(capacity - 1, -1, -1))
        self._scratch = torch.empty(0, d + 1, 2 * d + 1, dtype=config.torch_dtype)

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    def __len__(self) -> int:
        return len(self._slots)

    def keys(self) -> list[str]:
        return list(self._slots)

    def slot(self, key: str) -> int:
        """The slot of ``key``, assigning an empty one if it has none."""
        slot = self._slots.get(key)
        if slot is None:
            if not self._free:
                raise ArenaFullError(f"arena of {self.capacity} sessions is full")
            slot = self._free.pop()
            self._slots[key] = slot
        return slot

    def slot_of(self, key: str) -> int | None:
        return self._slots.get(key)

    def evict(self, key: str) -> SessionSums | None:
        """Take ``key`` out of the arena (its slot is zeroed and freed); returns its sums."""
        slot = self._slots.pop(key, None)
        if slot is None:
            return None
        out = self.cut(slot)
        self._reset(slot)
        self._free.append(slot)
        return out

    def free(self, key: str) -> None:
        """Take ``key`` out of the arena without cutting its sums (an LRU eviction whose
        snapshot is already stored): its slot is zeroed and freed."""
        slot = self._slots.pop(key, None)
        if slot is not None:
            self._reset(slot)
            self._free.append(slot)

    def _empty_ring(self) -> CodeRing | None:
        return None if self.ring_config is None else codes.empty(self.ring_config)

    def _reset(self, slot: int) -> None:
        self.rings[slot] = self._empty_ring()
        self.sums[slot].zero_()
        self.ref[slot] = 0.0
        self.last[slot] = -math.inf
        self.counts[slot].zero_()
        self.marks[slot] = {}

    def load(self, key: str, state: SessionSums) -> int:
        """Put a restored session into ``key``'s slot (replacing what the slot held)."""
        if state.config != self.config:
            raise StateConfigError(f"session {key}: state of config {state.config} in an arena "
                                   f"of {self.config}; rebuild the session states (run the "
                                   "worker on a fresh home: docs/session-state.md)")
        if state.ring is not None and state.ring.config != self.ring_config:
            raise StateConfigError(f"session {key}: code ring of config {state.ring.config} in "
                                   f"an arena of {self.ring_config}; rebuild the session states "
                                   "(run the worker on a fresh home: docs/session-state.md)")
        slot = self.slot(key)
        if state.ring is None and self.ring_config is not None and any(state.counts):
            logger.warning("session %s was snapshotted without a code ring: it reads through "
                           "its sums until `memstack replay` rebuilds it", key)
        self.rings[slot] = state.ring if state.ring is not None or any(state.counts) \
            else self._empty_ring()
        self.sums[slot].copy_(state.sums)
        self.ref[slot] = state.ref_time
        self.last[slot] = state.last_time
        self.counts[slot] = torch.tensor(state.counts, dtype=torch.int64)
        self.marks[slot] = dict(state.marks)
        return slot

    def cut(self, slot: int) -> SessionSums:
        """A copy of one slot as :class:`SessionSums` (canonical sums)."""
        return SessionSums(self.config, canonical(self.sums[slot]), float(self.ref[slot]),
                           float(self.last[slot]), tuple(int(c) for c in self.counts[slot]),
                           dict(self.marks[slot]), self.rings[slot])

    def add_codes(self, slot: int, offsets: list[int], table: codes.U8,
                  lengths: codes.I64) -> None:
        """Add turns (log offsets, codes, text lengths) to the slot's ring (a slot without one:
        no-op)."""
        ring = self.rings[slot]
        if ring is not None and offsets:
            self.rings[slot] = codes.append(ring, offsets, table, lengths)

    def remove_codes(self, slot: int, offsets: list[int], kept_offsets: list[int],
                     kept_table: codes.U8, kept_lengths: codes.I64) -> None:
        """Remove turns from the slot's ring, which takes in the turns the stores keep."""
        ring = self.rings[slot]
        if ring is not None and offsets:
            self.rings[slot] = codes.remove(ring, offsets, kept_offsets, kept_table,
                                            kept_lengths)

    def add(self, terms: Terms) -> None:
        """Add every term in place: rebase touched slots if needed, then one batched matmul."""
        if not len(terms):
            return
        slots = terms.slots
        touched = torch.unique(slots)
        t_max = torch.full((self.capacity,), -math.inf, dtype=torch.float64)
        t_max.scatter_reduce_(0, slots, terms.times.to(torch.float64), reduce="amax")
        self._rebase(touched, t_max[touched])
        self.last[touched] = torch.maximum(self.last[touched], t_max[touched])
        self._accumulate(terms, sign=1.0)
        self.counts.index_put_((slots, terms.heads), torch.ones_like(slots), accumulate=True)

    def subtract(self, terms: Terms) -> None:
        """Subtract exactly the terms :meth:`add` added (same key, value, time, weight).

        The caller guarantees the terms were added and not yet subtracted (see the module doc).
        A head left with no item is reset to exact zeros.
        """
        if not len(terms):
            return
        self._accumulate(terms, sign=-1.0)
        self.counts.index_put_((terms.slots, terms.heads), -torch.ones_like(terms.slots),
                               accumulate=True)
        if bool((self.counts < 0).any()):
            raise ValueError("more items subtracted than added; the state must be rebuilt")
        emptied = (self.counts == 0) & (torch.zeros_like(self.counts, dtype=torch.bool)
                                        .index_put_((terms.slots, terms.heads),
                                                    torch.tensor(True)))
        for slot, head in emptied.nonzero().tolist():
            self.sums[slot, head].zero_()

    def _rebase(self, touched: torch.Tensor, t_max: torch.Tensor) -> None:
        """Move each touched slot's reference time up the grid (one scalar multiply each)."""
        cfg = self.config
        if cfg.rate == 0.0:
            return
        for slot, t in zip(touched.tolist(), t_max.tolist(), strict=True):
            old = float(self.ref[slot])
            new = _grid_ref(cfg, old, t)
            if new != old:
                self.sums[slot].mul_(math.exp(-cfg.rate * (new - old)))
                self.ref[slot] = new

    def _accumulate(self, terms: Terms, sign: float) -> None:
        cfg = self.config
        coeff = terms.weights * torch.exp(-cfg.rate * (self.ref[terms.slots] - terms.times))
        coeff = (sign * coeff).to(cfg.torch_dtype)
        ones = torch.ones(len(terms), 1, dtype=cfg.torch_dtype)
        keys = terms.keys.to(cfg.torch_dtype)
        left = torch.cat([keys, ones], dim=1) * coeff[:, None]
        right = torch.cat([keys, terms.values.to(cfg.torch_dtype), ones], dim=1)
        groups = terms.slots * N_HEADS + terms.heads
        used, dense = torch.unique(groups, return_inverse=True)
        left_p, right_p = _padded(dense, left, right, len(used))
        flat = self.sums.view(self.capacity * N_HEADS, cfg.dim + 1, 2 * cfg.dim + 1)
        first, n = int(used[0]), len(used)
        if int(used[-1]) - first + 1 == n:  # a contiguous run of groups: add in place
            flat[first:first + n].baddbmm_(left_p.transpose(1, 2), right_p)
        else:
            if self._scratch.shape[0] < n:  # reused: a fresh product tensor costs page faults
                self._scratch = flat.new_empty(n, cfg.dim + 1, 2 * cfg.dim + 1)
            products = self._scratch[:n]
            torch.bmm(left_p.transpose(1, 2), right_p, out=products)
            flat.index_add_(0, used, products)
