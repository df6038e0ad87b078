"""Snapshot and restore of a :class:`SessionState` as compact, versioned bytes.

Layout (little-endian)::

    b"MSST" | u16 format version | u32 header length | header (UTF-8 JSON)
    | per head: upper triangle of H_kk, H_kv, s_k, s_v, W   (accumulator dtype)
    | item heads (u8 × n) | item values (float32 × n × dim)

The fixed-size form (``b"MSSF"``, :func:`snapshot_sums`) has the same prefix, header and sums,
then the session's code ring when it has one (:func:`memstack.operators.session_state.codes.
snapshot`, fixed size; format 2). Format 1 snapshots (no ring) still restore, without a ring.

The header holds the config, the reference and last times and the item ids. The lower triangle
of ``H_kk`` and the duplicate ``s_k`` column are not stored: they are rebuilt from the rest, so
a round trip is bit-exact in the canonical form that reads use
(:func:`~memstack.operators.session_state.canonical`). The bytes are the changelog value of a
durable table.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from memstack.foundation.errors import MemstackError
from memstack.operators.session_state import VALUE_DTYPE, SessionState, StateConfig, codes
from memstack.operators.session_state.arena import SessionSums, StateArena
from memstack.operators.session_state.keys import N_HEADS

MAGIC = b"MSST"
MAGIC_FIXED = b"MSSF"
"""The fixed-size form (:class:`SessionSums`): the durable state of the live pipeline."""
FORMAT_VERSION = 2
_PREFIX = struct.Struct("<4sHI")


class SnapshotFormatError(MemstackError):
    """Bytes are not a session-state snapshot this code can read.

    A newer format needs a newer memstack; a corrupt value means the state must be rebuilt by
    replaying the session's events (``memstack replay``).
    """


def matrix_bytes(config: StateConfig) -> int:
    """Bytes of the fixed-size part of a snapshot (the sums, all heads)."""
    d = config.dim
    per_head = d * (d + 1) // 2 + d * d + 2 * d + 1
    return N_HEADS * per_head * config.torch_dtype.itemsize


@functools.lru_cache(maxsize=8)
def _upper(d: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    rows, cols = np.triu_indices(d)  # the same row-major order as torch.triu_indices
    return rows, cols


def _pack_sums(sums: torch.Tensor, d: int) -> bytes:
    rows, cols = _upper(d)
    parts = []
    for m in sums.detach().cpu().contiguous().numpy():  # numpy indexing: ~50x faster here
        parts += [m[rows, cols], m[:d, d:2 * d].reshape(-1), m[d, :].reshape(-1)]
    return bytes(np.concatenate(parts).tobytes())


def snapshot_sums(state: SessionSums) -> bytes:
    """Serialise a fixed-size state: the header, the sums (no per-item table), the code ring.

    Its size depends only on the configs (plus a few bytes of times, counts and marks).
    """
    header = {
        "config": asdict(state.config),
        "ref_time": state.ref_time,
        "last_time": state.last_time if math.isfinite(state.last_time) else None,
        "counts": list(state.counts),
        "marks": dict(state.marks),
    }
    head_bytes = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    ring = b"" if state.ring is None else codes.snapshot(state.ring)
    return (_PREFIX.pack(MAGIC_FIXED, FORMAT_VERSION, len(head_bytes)) + head_bytes
            + _pack_sums(state.sums, state.config.dim) + ring)


def snapshot_slot(arena: StateArena, slot: int) -> bytes:
    """``snapshot_sums(arena.cut(slot))``, the same bytes without the canonical copy: the
    snapshot stores only the upper triangle of ``H_kk`` and the ``s_k`` row, which
    :func:`~memstack.operators.session_state.canonical` leaves as they are (it rewrites their
    twins). The live worker cuts one per touched session per batch."""
    config = arena.config
    return snapshot_sums(SessionSums(config, arena.sums[slot], float(arena.ref[slot]),
                                     float(arena.last[slot]),
                                     tuple(int(c) for c in arena.counts[slot]),
                                     dict(arena.marks[slot]), arena.rings[slot]))


def restore_sums(data: bytes) -> SessionSums:
    """Rebuild a :class:`SessionSums` from :func:`snapshot_sums` bytes (bit-exact)."""
    if len(data) < _PREFIX.size or _PREFIX.unpack_from(data)[0] != MAGIC_FIXED:
        raise SnapshotFormatError("not a fixed-size session-state snapshot; rebuild by replay")
    _, version, head_len = _PREFIX.unpack_from(data)
    _check_version(version)
    with _corrupt_is_format_error():
        header, config, body = _header_and_body(data, head_len)
        sums_end = matrix_bytes(config)
        ring = None
        if len(body) > sums_end and version >= 2:
            ring = codes.restore(body[sums_end:])
        elif len(body) != sums_end:
            raise ValueError("trailing or missing bytes")
        last = header["last_time"]
        return SessionSums(config, _unpack_sums(_flat_sums(config, body), config.dim),
                           float(header["ref_time"]),
                           -math.inf if last is None else float(last),
                           tuple(int(c) for c in header["counts"]),
                           {str(k): int(v) for k, v in header["marks"].items()}, ring)


def snapshot(state: SessionState) -> bytes:
    """Serialise ``state``; :func:`restore` gives back an equal state."""
    d = state.config.dim
    header = {
        "config": asdict(state.config),
        "ref_time": state.ref_time,
        "last_time": state.last_time if math.isfinite(state.last_time) else None,
        "ids": list(state.item_ids),
    }
    head_bytes = json.dumps(header, separators=(",", ":")).encode()
    sums = _pack_sums(state.sums, d)
    heads = state.item_heads.to(torch.uint8).numpy().tobytes()
    values = state.values.numpy().astype("<f4").tobytes()
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, len(head_bytes)) + head_bytes + sums + heads + values


def restore(data: bytes) -> SessionState:
    """Rebuild a state from :func:`snapshot` bytes; raises :class:`SnapshotFormatError`."""
    if len(data) < _PREFIX.size:
        raise SnapshotFormatError("snapshot too short; rebuild the state by replaying its session")
    magic, version, head_len = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise SnapshotFormatError("not a session-state snapshot (bad magic)")
    _check_version(version)
    with _corrupt_is_format_error():
        header, config, body = _header_and_body(data, head_len)
        return _decode(config, header, body)


def _check_version(version: int) -> None:
    """Both snapshot forms: a newer format than this code writes is refused, not guessed at."""
    if version > FORMAT_VERSION:
        raise SnapshotFormatError(f"snapshot format {version} is newer than {FORMAT_VERSION}; "
                                  "upgrade memstack to read it")


@contextmanager
def _corrupt_is_format_error() -> Iterator[None]:
    """Bytes that do not decode (bad JSON, missing keys, short body) are a corrupt snapshot."""
    try:
        yield
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotFormatError(f"corrupt snapshot ({exc}); rebuild it by replay") from exc


def _header_and_body(data: bytes, head_len: int) -> tuple[Any, StateConfig, memoryview]:
    """The JSON header after the prefix, its config, and the bytes after the header."""
    start = _PREFIX.size
    header = json.loads(data[start:start + head_len])
    return header, StateConfig(**header["config"]), memoryview(data)[start + head_len:]


def _flat_sums(config: StateConfig, body: memoryview) -> torch.Tensor:
    """The stored sums block at the start of ``body``, flat, in the accumulator dtype."""
    n = matrix_bytes(config) // config.torch_dtype.itemsize
    np_dtype = np.dtype("<f8" if config.dtype == "float64" else "<f4")
    return torch.from_numpy(np.frombuffer(body, np_dtype, count=n).copy())


def _decode(config: StateConfig, header: dict[str, object], body: memoryview) -> SessionState:
    d = config.dim
    ids = tuple(str(i) for i in header["ids"])  # type: ignore[attr-defined]  # a JSON list
    flat = _flat_sums(config, body)
    offset = matrix_bytes(config)
    heads = torch.from_numpy(np.frombuffer(body, np.uint8, len(ids), offset).astype(np.int64))
    offset += len(ids)
    values = np.frombuffer(body, "<f4", len(ids) * d, offset).reshape(len(ids), d)
    if offset + values.nbytes != len(body):
        raise ValueError("trailing or missing bytes")
    last = header["last_time"]
    return SessionState(
        config=config,
        sums=_unpack_sums(flat, d),
        ref_time=float(header["ref_time"]),  # type: ignore[arg-type]  # a JSON number
        last_time=-math.inf if last is None else float(last),  # type: ignore[arg-type]
        item_ids=ids,
        item_heads=heads,
        values=torch.from_numpy(values.copy()).to(VALUE_DTYPE),
    )


def _unpack_sums(flat: torch.Tensor, d: int) -> torch.Tensor:
    rows, cols = torch.triu_indices(d, d)
    tri = d * (d + 1) // 2
    per_head = tri + d * d + 2 * d + 1
    sums = flat.new_zeros(N_HEADS, d + 1, 2 * d + 1)
    for h in range(N_HEADS):
        chunk = flat[h * per_head:(h + 1) * per_head]
        h_kk = flat.new_zeros(d, d)
        h_kk[rows, cols] = chunk[:tri]
        h_kk[cols, rows] = chunk[:tri]
        sums[h, :d, :d] = h_kk
        sums[h, :d, d:2 * d] = chunk[tri:tri + d * d].reshape(d, d)
        sums[h, d, :] = chunk[tri + d * d:]
        sums[h, :d, 2 * d] = sums[h, d, :d]
    return sums
