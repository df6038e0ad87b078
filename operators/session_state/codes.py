"""The code ring: a session state of fixed bytes whose read-out needs nothing but itself.

The sums of :mod:`memstack.operators.session_state` are decoded against the turn vectors the
stores hold, which a byte count of the sums leaves out. The code ring holds what its read-out
needs: for each turn it holds, a ``bits``-bit sign code of the turn's embedding (the signs of
the first ``bits`` coordinates of a seeded orthonormal rotation, the SimHash family), the turn's
log offset, the coordinate that names the event (4 bytes, counted back from the newest offset
held), and the turn's text length in bytes (2 bytes, capped), its salience. A read scores the
codes against the query's rotated coordinates (an asymmetric estimate of the cosine) and returns
``(offset, score)`` pairs. The snapshot (:func:`snapshot`) is the whole state; its size is
fixed by the config (:func:`snapshot_size`).

**What it holds is a function of the session's items alone:** of the items no more than
``MAX_SPAN`` offsets behind the newest, the latest ``capacity - salient slots`` by offset, and
among the older ones the ``salient slots`` longest (ties: the newer). A longer turn says more
(names, dates, plans); that is the one salience signal that needs nothing but the turn itself.
So an append of items already held adds nothing, and a removal is exact when the caller hands
back the items the stores keep (:func:`remove` takes them in): the ring then equals one built
from the surviving items (tested).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from memstack.foundation.errors import MemstackError
from memstack.operators.session_state.keys import EMBED_DIM, projection

MAGIC = b"MSCR"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sHHHIIIq")
"""magic, format version, bits, salient share (per mille), budget, seed, items held, newest
offset held (-1: none)."""
OFFSET_BYTES = 4
LENGTH_BYTES = 2
MAX_LENGTH = 2**16 - 1
MAX_SPAN = 2**32 - 1
"""The farthest a held item's offset may lie behind the newest held one (4-byte deltas)."""

U8 = npt.NDArray[np.uint8]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class CodeRingFormatError(MemstackError):
    """Bytes are not a code-ring snapshot this code can read; rebuild the state by replaying
    the session's events (``memstack replay``)."""


@dataclass(frozen=True)
class RingConfig:
    """A code ring's fixed parameters: code bits, the byte budget of its snapshot, the share of
    its slots that hold the longest older turns, the seed of its rotation. The capacity (items
    held) is the most the budget fits."""

    bits: int = 128
    budget: int = 8192
    salient: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.bits % 8 or not 8 <= self.bits <= EMBED_DIM:
            raise ValueError(f"bits must be a multiple of 8 in 8..{EMBED_DIM}, got {self.bits}")
        if not 0.0 <= self.salient < 1.0 or abs(self.salient * 1000
                                                 - round(self.salient * 1000)) > 1e-9:
            raise ValueError(f"salient must be a share in [0, 1) in steps of 0.001, got "
                             f"{self.salient}")
        if self.capacity < 1:
            raise ValueError(f"a budget of {self.budget} bytes holds no item of "
                             f"{self.slot_bytes} bytes; raise the budget or lower the bits")

    @property
    def code_bytes(self) -> int:
        return self.bits // 8

    @property
    def slot_bytes(self) -> int:
        """Bytes per item: its code, its log offset and its length."""
        return self.code_bytes + OFFSET_BYTES + LENGTH_BYTES

    @property
    def capacity(self) -> int:
        return max((self.budget - _HEADER.size) // self.slot_bytes, 0)

    @property
    def salient_slots(self) -> int:
        return int(self.capacity * self.salient)


def snapshot_size(config: RingConfig) -> int:
    """Bytes of every snapshot of a ring with ``config`` (at most ``config.budget``)."""
    return _HEADER.size + config.capacity * config.slot_bytes


@lru_cache(maxsize=8)
def _rotation(seed: int, bits: int) -> F64:
    rot: F64 = projection(seed, bits).numpy()
    return rot


@dataclass(frozen=True)
class CodeRing:
    """One session's ring: held items in offset order. Immutable: operations return new rings."""

    config: RingConfig
    offsets: I64  # (n,) ascending, n <= capacity
    codes: U8  # (n, code_bytes)
    lengths: I64  # (n,) text bytes, capped at MAX_LENGTH

    @property
    def items(self) -> int:
        return int(self.offsets.shape[0])

    def same_as(self, other: CodeRing) -> bool:
        return (self.config == other.config and np.array_equal(self.offsets, other.offsets)
                and np.array_equal(self.codes, other.codes)
                and np.array_equal(self.lengths, other.lengths))


def empty(config: RingConfig) -> CodeRing:
    return CodeRing(config, np.zeros(0, dtype=np.int64),
                    np.zeros((0, config.code_bytes), dtype=np.uint8), np.zeros(0, dtype=np.int64))


def lengths_of(texts: Sequence[str]) -> I64:
    """Salience of turns: their UTF-8 lengths, capped at ``MAX_LENGTH``."""
    return np.minimum(np.asarray([len(t.encode()) for t in texts], dtype=np.int64), MAX_LENGTH)


def encode(config: RingConfig, vectors: npt.NDArray[np.floating[Any]]) -> U8:
    """Sign codes ``(m, code_bytes)`` of embeddings ``(m, 384)``: bit set where the rotated
    coordinate is >= 0."""
    rotated = np.asarray(vectors, dtype=np.float64).reshape(-1, EMBED_DIM) @ _rotation(
        config.seed, config.bits)
    packed: U8 = np.packbits(rotated >= 0.0, axis=1)
    return packed


def chosen(config: RingConfig, offsets: Sequence[int] | I64, lengths: Sequence[int] | I64
           ) -> I64:
    """Positions (into ``offsets``) of the items a ring holds out of these, in offset order:
    one per offset, within the span, the latest ones and the longest older ones. It needs only
    offsets and lengths, so a caller can pick the items before computing their codes."""
    off = np.asarray(offsets, dtype=np.int64).reshape(-1)
    lens = np.minimum(np.asarray(lengths, dtype=np.int64).reshape(-1), MAX_LENGTH)
    unique, first = np.unique(off, return_index=True)  # ascending, one per offset
    if len(unique):
        within = unique >= unique[-1] - MAX_SPAN
        unique, first = unique[within], first[within]
    recent = config.capacity - config.salient_slots
    keep = np.arange(max(len(unique) - recent, 0), len(unique))
    older = len(unique) - len(keep)
    if config.salient_slots and older:
        ranked = np.lexsort((unique[:older], lens[first[:older]]))  # by length, then offset
        keep = np.concatenate([np.sort(ranked[-config.salient_slots:]), keep])
    picked: I64 = first[keep].astype(np.int64)
    return picked


def _kept(config: RingConfig, offsets: I64, table: U8, lengths: I64) -> CodeRing:
    """The ring of these items (see the module doc and :func:`chosen`)."""
    keep = chosen(config, offsets, lengths)
    return CodeRing(config, offsets[keep].astype(np.int64), table[keep].copy(),
                    np.minimum(lengths[keep], MAX_LENGTH).astype(np.int64))


def _items(offsets: Sequence[int] | I64, table: U8 | None, lengths: Sequence[int] | I64 | None,
           code_bytes: int, what: str) -> tuple[I64, U8, I64]:
    off = np.asarray(offsets, dtype=np.int64).reshape(-1)
    codes_ = (np.zeros((0, code_bytes), dtype=np.uint8) if table is None
              else np.asarray(table, dtype=np.uint8).reshape(-1, code_bytes))
    lens = (np.zeros(0, dtype=np.int64) if lengths is None
            else np.asarray(lengths, dtype=np.int64).reshape(-1))
    if not len(off) == len(codes_) == len(lens):
        raise ValueError(f"{len(off)} {what}offsets but {len(codes_)} codes and {len(lens)} "
                         "lengths")
    return off, codes_, lens


def append(ring: CodeRing, offsets: Sequence[int] | I64, table: U8,
           lengths: Sequence[int] | I64) -> CodeRing:
    """The ring with these items added (those already held add nothing)."""
    new, codes_, lens = _items(offsets, table, lengths, ring.config.code_bytes, "")
    if not len(new):
        return ring
    return _kept(ring.config, np.concatenate([ring.offsets, new]),
                 np.concatenate([ring.codes, codes_]), np.concatenate([ring.lengths, lens]))


def remove(ring: CodeRing, offsets: Sequence[int] | I64, kept_offsets: Sequence[int] | I64 = (),
           kept_codes: U8 | None = None, kept_lengths: Sequence[int] | I64 | None = None
           ) -> CodeRing:
    """The ring without the items at ``offsets``, taking in ``kept_*`` (the turns the stores keep
    for the session): equal to a ring built from the surviving items when every surviving turn
    is given or held. Removing items the ring does not hold changes nothing."""
    gone = np.asarray(offsets, dtype=np.int64).reshape(-1)
    stay = ~np.isin(ring.offsets, gone)
    if stay.all():
        return ring
    kept, more, lens = _items(kept_offsets, kept_codes, kept_lengths, ring.config.code_bytes,
                              "kept ")
    fresh = ~np.isin(kept, gone)
    return _kept(ring.config, np.concatenate([ring.offsets[stay], kept[fresh]]),
                 np.concatenate([ring.codes[stay], more[fresh]]),
                 np.concatenate([ring.lengths[stay], lens[fresh]]))


def read(ring: CodeRing, query: npt.NDArray[np.floating[Any]], k: int) -> list[tuple[int, float]]:
    """The ``k`` held items whose codes best match ``query`` (a 384-dim embedding), best first:
    ``(offset, score)``, the score an estimate of the cosine in [-1, 1]; ties go to the newer."""
    if k < 1 or not ring.items:
        return []
    q = np.asarray(query, dtype=np.float64).reshape(EMBED_DIM) @ _rotation(
        ring.config.seed, ring.config.bits)
    signs = np.unpackbits(ring.codes, axis=1).astype(np.float64) * 2.0 - 1.0
    scores = (signs @ q) / (math.sqrt(ring.config.bits) * max(float(np.linalg.norm(q)), 1e-12))
    order = np.lexsort((-ring.offsets, -scores))[:k]
    return [(int(ring.offsets[i]), float(scores[i])) for i in order]


def snapshot(ring: CodeRing) -> bytes:
    """The ring as fixed-size bytes (:func:`snapshot_size`); :func:`restore` reads them back."""
    cfg, n = ring.config, ring.items
    newest = int(ring.offsets[-1]) if n else -1
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, cfg.bits, round(cfg.salient * 1000), cfg.budget,
                        cfg.seed, n, newest)
    deltas = np.zeros(cfg.capacity, dtype="<u4")
    deltas[:n] = newest - ring.offsets
    lengths = np.zeros(cfg.capacity, dtype="<u2")
    lengths[:n] = ring.lengths
    table = np.zeros((cfg.capacity, cfg.code_bytes), dtype=np.uint8)
    table[:n] = ring.codes
    return head + deltas.tobytes() + lengths.tobytes() + table.tobytes()


def restore(data: bytes | memoryview) -> CodeRing:
    """A ring from :func:`snapshot` bytes; raises :class:`CodeRingFormatError`."""
    if len(data) < _HEADER.size:
        raise CodeRingFormatError("code-ring snapshot too short")
    magic, version, bits, salient, budget, seed, n, newest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CodeRingFormatError("not a code-ring snapshot")
    if version != FORMAT_VERSION:
        raise CodeRingFormatError(f"code-ring format {version} is not {FORMAT_VERSION}; "
                                  "a newer format needs a newer memstack")
    config = _config(bits, salient, budget, seed)
    if len(data) != snapshot_size(config) or n > config.capacity:
        raise CodeRingFormatError(f"a code ring of {bits}-bit codes in {budget} bytes is "
                                  f"{snapshot_size(config)} bytes, got {len(data)}")
    cap, at = config.capacity, _HEADER.size
    deltas = np.frombuffer(data, "<u4", n, at).astype(np.int64)
    at += cap * OFFSET_BYTES
    lengths = np.frombuffer(data, "<u2", n, at).astype(np.int64)
    at += cap * LENGTH_BYTES
    codes = np.frombuffer(data, np.uint8, n * config.code_bytes, at).reshape(
        n, config.code_bytes).copy()
    return CodeRing(config, int(newest) - deltas, codes, lengths)


def _config(bits: int, salient: int, budget: int, seed: int) -> RingConfig:
    try:
        return RingConfig(bits=bits, budget=budget, salient=salient / 1000, seed=seed)
    except ValueError as exc:
        raise CodeRingFormatError(f"corrupt code-ring header: {exc}") from exc


def size_of(data: bytes | memoryview) -> int:
    """The byte size of the ring snapshot that starts ``data`` (read from its header)."""
    if len(data) < _HEADER.size:
        raise CodeRingFormatError("code-ring snapshot too short")
    _, _, bits, salient, budget, seed, _, _ = _HEADER.unpack_from(data)
    return snapshot_size(_config(bits, salient, budget, seed))
