"""The session state: a fixed-size, exactly erasable associative memory per (tenant, session).

Per head (see :mod:`memstack.operators.session_state.keys`) the state keeps decayed
least-squares sums (MesaNet-style), all in one augmented matrix ``M`` of shape
``(dim + 1, 2 * dim + 1)``::

    M = Σ_i c_i [k_i; 1] [k_i, v_i, 1]ᵀ   with   c_i = w_i γ^(t_ref − t_i)

so ``M[:d, :d] = H_kk``, ``M[:d, d:2d] = H_kv``, ``M[d, :d] = s_k``, ``M[d, d:2d] = s_v`` and
``M[d, 2d] = W`` (the total weight). Every term is additive, so :func:`remove` subtracts exactly
the term :func:`update` added. Sums are kept relative to a reference time ``t_ref`` on a fixed
grid; the decay to the read time is one scalar, applied lazily at :func:`read`.

A read centres on the session's own weighted mean (``s_k / W``; an exact running mean, because
its sums are additive too) and solves ridge regression:
``x = (C_kk + λI)⁻¹ (q − m_k)``, ``out = C_kvᵀ x``, then decodes ``out`` against the values of
the items stored in that head (cosine with the centred values) to ``(item_id, score)`` pairs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import torch

from memstack.foundation.errors import MemstackError
from memstack.operators.session_state.keys import EMBED_DIM, N_HEADS, Head, project, projection

logger = logging.getLogger(__name__)

REBASE_NATS = 16.0
"""Grid step of the reference time, in nats of decay: sums never grow by more than e^16."""

VALUE_DTYPE = torch.float32
"""Precision of the per-item decode table (values are only compared by cosine)."""


class StateMismatchError(MemstackError):
    """An item given for removal does not match what the state stored under its id.

    Recompute the item from the stores with the state's own config (same seed and dim) and the
    event's original log time and weight; a state built with another config must be rebuilt.
    """


@dataclass(frozen=True)
class StateConfig:
    """Fixed parameters of a session state; part of every snapshot."""

    dim: int = 128
    gamma_per_hour: float = 0.999
    lam: float = 1e-3
    seed: int = 0
    centre: bool = True
    dtype: str = "float64"

    def __post_init__(self) -> None:
        if not 0 < self.gamma_per_hour <= 1:
            raise ValueError(f"gamma_per_hour must be in (0, 1], got {self.gamma_per_hour}")
        if self.lam <= 0:
            raise ValueError(f"lam must be > 0, got {self.lam}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype!r}")
        if not 0 < self.dim <= EMBED_DIM:
            raise ValueError(f"dim must be in 1..{EMBED_DIM}, got {self.dim}")

    @property
    def rate(self) -> float:
        """Decay in nats per second of log time."""
        return -math.log(self.gamma_per_hour) / 3600.0

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch.float64 if self.dtype == "float64" else torch.float32


@lru_cache(maxsize=16)
def _projection(seed: int, dim: int, dtype: torch.dtype) -> torch.Tensor:
    return projection(seed, dim).to(dtype)


@dataclass(frozen=True)
class ItemBatch:
    """Items to add (or one to remove): projected unit keys/values and their log times."""

    ids: tuple[str, ...]
    heads: torch.Tensor  # (m,) int64
    keys: torch.Tensor  # (m, dim) accumulator dtype
    values: torch.Tensor  # (m, dim) accumulator dtype
    times: torch.Tensor  # (m,) float64, POSIX seconds of log time
    weights: torch.Tensor  # (m,) float64

    def __len__(self) -> int:
        return len(self.ids)


def make_items(
    config: StateConfig,
    ids: Sequence[str],
    heads: Sequence[Head],
    key_embeddings: torch.Tensor,
    value_embeddings: torch.Tensor,
    times: Sequence[float],
    weights: Sequence[float] | None = None,
) -> ItemBatch:
    """Project 384-dim embeddings into an :class:`ItemBatch` for ``config``."""
    proj = _projection(config.seed, config.dim, config.torch_dtype)
    m = len(ids)
    return ItemBatch(
        ids=tuple(ids),
        heads=torch.tensor([int(h) for h in heads], dtype=torch.int64).reshape(m),
        keys=project(key_embeddings.reshape(m, key_embeddings.shape[-1]), proj),
        values=project(value_embeddings.reshape(m, value_embeddings.shape[-1]), proj),
        times=torch.tensor(list(times), dtype=torch.float64).reshape(m),
        weights=torch.tensor(list(weights) if weights is not None else [1.0] * m,
                             dtype=torch.float64).reshape(m),
    )


def query_key(config: StateConfig, embedding: torch.Tensor) -> torch.Tensor:
    """The projected key of a 384-dim query embedding."""
    return project(embedding.reshape(-1), _projection(config.seed, config.dim, config.torch_dtype))


@dataclass(frozen=True)
class SessionState:
    """One session's memory. Immutable: every operation returns a new state."""

    config: StateConfig
    sums: torch.Tensor  # (N_HEADS, dim + 1, 2 * dim + 1), accumulator dtype
    ref_time: float  # POSIX seconds the sums are scaled to
    last_time: float  # latest log time seen; the default read time
    item_ids: tuple[str, ...]
    item_heads: torch.Tensor  # (n,) int64
    values: torch.Tensor  # (n, dim) VALUE_DTYPE: the decode table

    @property
    def item_count(self) -> int:
        return len(self.item_ids)

    def sums_at(self, t: float | None = None) -> torch.Tensor:
        """Canonical sums decayed to log time ``t`` (default: the latest): terms w γ^(t − t_i)."""
        at = self.last_time if t is None else t
        return canonical(self.sums) * math.exp(-self.config.rate * (at - self.ref_time))


def empty(config: StateConfig) -> SessionState:
    d = config.dim
    return SessionState(
        config=config,
        sums=torch.zeros(N_HEADS, d + 1, 2 * d + 1, dtype=config.torch_dtype),
        ref_time=0.0,
        last_time=-math.inf,
        item_ids=(),
        item_heads=torch.zeros(0, dtype=torch.int64),
        values=torch.zeros(0, d, dtype=VALUE_DTYPE),
    )


def _grid_ref(config: StateConfig, ref: float, t_max: float) -> float:
    """The reference time after seeing ``t_max``: a grid point, never moving backwards."""
    if config.rate == 0.0 or not math.isfinite(t_max):
        return ref
    step = REBASE_NATS / config.rate
    return max(ref, math.floor(t_max / step) * step)


def _coefficients(config: StateConfig, ref: float, batch: ItemBatch) -> torch.Tensor:
    """``w_i γ^(ref − t_i)`` for each item, in the accumulator dtype."""
    c = batch.weights * torch.exp(-config.rate * (ref - batch.times))
    return c.to(config.torch_dtype)


def _factors(batch: ItemBatch, coeff: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Left ``c·[k; 1]`` and right ``[k, v, 1]`` factors of each item's term."""
    ones = torch.ones(len(batch), 1, dtype=batch.keys.dtype)
    left = torch.cat([batch.keys, ones], dim=1) * coeff[:, None]
    right = torch.cat([batch.keys, batch.values, ones], dim=1)
    return left, right


def canonical(sums: torch.Tensor) -> torch.Tensor:
    """``sums`` with the upper triangle of ``H_kk`` and the ``s_k`` row mirrored into their twins.

    The twins (lower triangle, ``s_k`` column) differ from the originals only by rounding order;
    reads and snapshots use this canonical form, so a snapshot round trip reads back bit-exactly.
    Returns a new tensor.
    """
    d = sums.shape[-2] - 1
    out = sums.clone()
    h_kk = sums[..., :d, :d]
    out[..., :d, :d] = torch.triu(h_kk) + torch.triu(h_kk, 1).transpose(-1, -2)
    out[..., :d, 2 * d] = sums[..., d, :d]
    return out


def _new_items(state: SessionState, batch: ItemBatch) -> ItemBatch:
    """``batch`` without ids the state already holds (or repeats within it): idempotent writes."""
    seen = set(state.item_ids)
    keep: list[int] = []
    for i, item_id in enumerate(batch.ids):
        if item_id not in seen:
            seen.add(item_id)
            keep.append(i)
    if len(keep) == len(batch):
        return batch
    idx = torch.tensor(keep, dtype=torch.int64)
    return ItemBatch(tuple(batch.ids[i] for i in keep), batch.heads[idx], batch.keys[idx],
                     batch.values[idx], batch.times[idx], batch.weights[idx])


def _prepared(state: SessionState, batch: ItemBatch) -> tuple[ItemBatch, float, float]:
    """New items, the new reference time and the factor that rebases the old sums to it."""
    batch = _new_items(state, batch)
    t_max = float(batch.times.max()) if len(batch) else -math.inf
    ref = _grid_ref(state.config, state.ref_time, t_max)
    return batch, ref, math.exp(-state.config.rate * (ref - state.ref_time))


def _with_table(
    state: SessionState, batch: ItemBatch, sums: torch.Tensor, ref: float
) -> SessionState:
    t_max = float(batch.times.max()) if len(batch) else -math.inf
    return replace(
        state,
        sums=sums,
        ref_time=ref,
        last_time=max(state.last_time, t_max),
        item_ids=state.item_ids + batch.ids,
        item_heads=torch.cat([state.item_heads, batch.heads]),
        values=torch.cat([state.values, batch.values.to(VALUE_DTYPE)]),
    )


def update(state: SessionState, batch: ItemBatch) -> SessionState:
    """Add ``batch``'s terms; ids already stored are skipped (replays are idempotent)."""
    batch, ref, rebase = _prepared(state, batch)
    if not len(batch):
        return state
    left, right = _factors(batch, _coefficients(state.config, ref, batch))
    onehot = torch.nn.functional.one_hot(batch.heads, N_HEADS).to(left.dtype)
    base = state.sums if rebase == 1.0 else state.sums * rebase
    sums = base + torch.einsum("mh,mi,mj->hij", onehot, left, right)
    return _with_table(state, batch, sums, ref)


def update_many(states: Sequence[SessionState], batches: Sequence[ItemBatch]) -> list[SessionState]:
    """:func:`update` for many sessions at once: one batched matmul over (session, head) groups."""
    if len(states) != len(batches):
        raise ValueError(f"{len(states)} states but {len(batches)} item batches")
    if not states:
        return []
    config = states[0].config
    if any(s.config != config for s in states):
        raise ValueError("update_many needs states of one config; group sessions by config first")
    prepared = [_prepared(s, b) for s, b in zip(states, batches, strict=True)]
    lefts, rights, groups = [], [], []
    for i, (batch, ref, _) in enumerate(prepared):
        left, right = _factors(batch, _coefficients(config, ref, batch))
        lefts.append(left)
        rights.append(right)
        groups.append(batch.heads + i * N_HEADS)
    stacked = torch.stack([s.sums if p[2] == 1.0 else s.sums * p[2]
                           for s, p in zip(states, prepared, strict=True)])
    d = config.dim
    flat = stacked.reshape(len(states) * N_HEADS, d + 1, 2 * d + 1)
    left_p, right_p = _padded(torch.cat(groups), torch.cat(lefts), torch.cat(rights), flat.shape[0])
    flat = torch.baddbmm(flat, left_p.transpose(1, 2), right_p)
    out = flat.reshape(len(states), N_HEADS, d + 1, 2 * d + 1).unbind(0)
    return [_with_table(s, p[0], sums, p[1]) if len(p[0]) else s
            for s, p, sums in zip(states, prepared, out, strict=True)]


def _padded(
    groups: torch.Tensor, left: torch.Tensor, right: torch.Tensor, n_groups: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scatter rows into ``(n_groups, m_max, ·)`` blocks, zero-padded (zeros add nothing)."""
    counts = torch.bincount(groups, minlength=n_groups)
    m_max = int(counts.max()) if len(groups) else 0
    order = torch.argsort(groups, stable=True)
    sorted_groups = groups[order]
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(len(groups)) - starts[sorted_groups]
    left_p = left.new_zeros(n_groups, m_max, left.shape[1])
    right_p = right.new_zeros(n_groups, m_max, right.shape[1])
    left_p[sorted_groups, slot] = left[order]
    right_p[sorted_groups, slot] = right[order]
    return left_p, right_p


def remove(state: SessionState, item: ItemBatch) -> SessionState:
    """Subtract exactly the terms :func:`update` added for ``item``'s ids; unknown ids are no-ops.

    ``item`` must carry the stored key, value, log time and weight (recomputed from the stores).
    Raises :class:`StateMismatchError` when a value differs from the one stored under its id.
    """
    index = {item_id: i for i, item_id in enumerate(state.item_ids)}
    rows = [(j, index[item_id]) for j, item_id in enumerate(item.ids) if item_id in index]
    if not rows:
        return state
    mine = torch.tensor([j for j, _ in rows], dtype=torch.int64)
    stored = torch.tensor([i for _, i in rows], dtype=torch.int64)
    _check_matches(state, item, mine, stored)
    sub = ItemBatch(tuple(item.ids[j] for j, _ in rows), item.heads[mine], item.keys[mine],
                    item.values[mine], item.times[mine], item.weights[mine])
    left, right = _factors(sub, _coefficients(state.config, state.ref_time, sub))
    onehot = torch.nn.functional.one_hot(sub.heads, N_HEADS).to(left.dtype)
    sums = state.sums - torch.einsum("mh,mi,mj->hij", onehot, left, right)
    keep = torch.ones(state.item_count, dtype=torch.bool)
    keep[stored] = False
    heads_left = state.item_heads[keep]
    for head in range(N_HEADS):  # an emptied head is exactly zero, not rounding residue
        if not bool((heads_left == head).any()):
            sums[head] = 0.0
    ids = tuple(i for i, k in zip(state.item_ids, keep.tolist(), strict=True) if k)
    return replace(state, sums=sums, item_ids=ids, item_heads=heads_left, values=state.values[keep])


def _check_matches(
    state: SessionState, item: ItemBatch, mine: torch.Tensor, stored: torch.Tensor
) -> None:
    same_head = torch.equal(item.heads[mine], state.item_heads[stored])
    close = torch.allclose(item.values[mine].to(VALUE_DTYPE), state.values[stored], atol=1e-5)
    if not (same_head and close):
        raise StateMismatchError(
            "the item to remove differs from the stored one (head or value); recompute it from "
            "the stores with this state's config (seed, dim) before removing"
        )


def read_vectors(state: SessionState, queries: torch.Tensor, head: Head, at: float | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw reads of ``head`` for projected ``queries`` (q, dim): ``(out (q, dim), value_mean)``."""
    return read_matrix(state.config, state.sums_at(at)[int(head)], queries)


def read_matrix(cfg: StateConfig, m: torch.Tensor, queries: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reads of one head's canonical, decayed matrix ``m``: ``(out (q, dim), value_mean)``."""
    d = cfg.dim
    h_kk, h_kv, s_k, s_v, w = m[:d, :d], m[:d, d:2 * d], m[d, :d], m[d, d:2 * d], m[d, 2 * d]
    mean_k, mean_v = torch.zeros_like(s_k), torch.zeros_like(s_v)
    if cfg.centre and float(w) > 1e-12:
        mean_k, mean_v = s_k / w, s_v / w
        h_kk = h_kk - w * torch.outer(mean_k, mean_k)
        h_kv = h_kv - w * torch.outer(mean_k, mean_v)
    eye = torch.eye(d, dtype=m.dtype)
    x = torch.linalg.solve(h_kk + cfg.lam * eye, (queries.to(m.dtype) - mean_k).mT)
    return (h_kv.T @ x).mT, mean_v


def score_values(out: torch.Tensor, mean_v: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Cosines (q, n) of reads ``out`` with candidate values (n, dim), both centred on the mean.

    Candidates can come from anywhere (the reference's own table, or values recomputed from the
    stores for a fixed-size state).
    """
    cand = values.to(out.dtype) - mean_v
    cand = cand / cand.norm(dim=1, keepdim=True).clamp_min(1e-12)
    scores: torch.Tensor = (out @ cand.T) / out.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return scores


def decode(state: SessionState, queries: torch.Tensor, k: int, head: Head = Head.TURNS,
           at: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` ``(scores, table rows)``, each (q, k), of the items of ``head`` for ``queries``."""
    queries = queries.reshape(-1, state.config.dim)
    rows = torch.nonzero(state.item_heads == int(head)).flatten()
    k = min(k, len(rows))
    if k <= 0:
        empty_rows = torch.zeros(len(queries), 0, dtype=torch.int64)
        return empty_rows.to(state.config.torch_dtype), empty_rows
    out, mean_v = read_vectors(state, queries, head, at)
    scores = score_values(out, mean_v, state.values[rows])
    top = torch.topk(scores, k, dim=1)
    return top.values, rows[top.indices]


def read(state: SessionState, query: torch.Tensor, k: int, head: Head = Head.TURNS,
         at: float | None = None) -> list[tuple[str, float]]:
    """The ``k`` stored items of ``head`` whose values best match the read of ``query``.

    ``query`` is a projected key (:func:`query_key`). Scores are cosines in [-1, 1].
    """
    scores, rows = decode(state, query, k, head, at)
    return [(state.item_ids[int(r)], float(s)) for s, r in zip(scores[0], rows[0], strict=True)]
