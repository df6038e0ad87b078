"""Rows <-> Arrow tables, and the deterministic content hash of a table.

Conversions are column-wise (one list comprehension per column), so a batch costs a few
attribute reads per row and one Arrow build, whichever store receives it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memstack.operators.log import LogPosition
from memstack.operators.mutations import FactEntry, FactVersion, MemoryRow, RecordRow
from memstack.pipelines.stores.base import Vectors
from memstack.schemas.metadata import metadata_of
from memstack.schemas.rows import FACT_ENTRIES, FACT_VERSIONS, RECORDS, memories_schema

T = TypeVar("T")

VECTOR_TOLERANCE = 1e-4
"""Embeddings are quantised to this grid before hashing (replays may differ in the last bits)."""


def _columns(rows: Sequence[Any], names: Sequence[str]) -> dict[str, list[Any]]:
    return {name: [getattr(r, name) for r in rows] for name in names}


def records_table(rows: Sequence[RecordRow]) -> pa.Table:
    return pa.Table.from_pydict(_columns(rows, RECORDS.names), schema=RECORDS)


def versions_table(rows: Sequence[FactVersion]) -> pa.Table:
    return pa.Table.from_pydict(_columns(rows, FACT_VERSIONS.names), schema=FACT_VERSIONS)


def entries_table(rows: Sequence[FactEntry]) -> pa.Table:
    cols = _columns(rows, FACT_ENTRIES.names[:-3])
    cols["tt"] = [r.tt.log_time for r in rows]
    cols["tt_partition"] = [r.tt.partition for r in rows]
    cols["tt_offset"] = [r.tt.offset for r in rows]
    return pa.Table.from_pydict(cols, schema=FACT_ENTRIES)


def memories_table(rows: Sequence[MemoryRow], vectors: Vectors, dim: int) -> pa.Table:
    schema = memories_schema(dim)
    cols = _columns(rows, [n for n in schema.names if n != "vector"])
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
    cols["vector"] = pa.FixedSizeListArray.from_arrays(flat, dim)
    return pa.Table.from_pydict(cols, schema=schema)


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _dicts(table: pa.Table) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = table.to_pylist()
    for row in out:
        for name, value in row.items():
            if isinstance(value, datetime):
                row[name] = _utc(value)
    return out


def _rows(table: pa.Table, make: Callable[..., T], names: Sequence[str]) -> list[T]:
    rows = _dicts(table.select(list(names)))
    if "metadata_json" in names:  # stored as JSON text, held as an object
        for row in rows:
            row["metadata"] = metadata_of(row.pop("metadata_json"))
    return [make(**row) for row in rows]


def to_records(table: pa.Table) -> list[RecordRow]:
    return _rows(table, RecordRow, RECORDS.names)


def to_versions(table: pa.Table) -> list[FactVersion]:
    return _rows(table, FactVersion, FACT_VERSIONS.names)


def to_memories(table: pa.Table) -> list[MemoryRow]:
    names = [n for n in memories_schema().names if n != "vector"]
    return _rows(table, MemoryRow, names)


def to_entries(table: pa.Table) -> list[FactEntry]:
    out: list[FactEntry] = []
    for row in _dicts(table.select(FACT_ENTRIES.names)):
        tt = LogPosition(row.pop("tt"), row.pop("tt_partition"), row.pop("tt_offset"))
        out.append(FactEntry(tt=tt, **row))
    return out


def table_hash(table: pa.Table, key: Sequence[str], tolerance: float = VECTOR_TOLERANCE) -> str:
    """A hash of the table's content, independent of row order, chunking and file layout.

    Rows are sorted by ``key``; timestamps hash as integer microseconds; float vectors are
    rounded to multiples of ``tolerance`` first.
    """
    digest = hashlib.blake2b(digest_size=16)
    table = table.sort_by([(k, "ascending") for k in key]).combine_chunks()
    digest.update(f"{table.num_rows}|{','.join(table.column_names)}".encode())
    for name in table.column_names:
        digest.update(name.encode())
        digest.update(_column_bytes(table.column(name), tolerance))
    return digest.hexdigest()


def _column_bytes(column: pa.ChunkedArray, tolerance: float) -> bytes:
    if pa.types.is_fixed_size_list(column.type):
        values = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
        grid = np.rint(values / tolerance)
        quantised: np.ndarray[Any, np.dtype[np.int64]] = grid.astype(np.int64)
        return quantised.tobytes()
    if pa.types.is_timestamp(column.type):
        column = pc.cast(column, pa.int64())
    return repr(column.to_pylist()).encode()


def combine(hashes: dict[str, str]) -> str:
    """One hash over named hashes (sorted by name)."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(hashes):
        digest.update(f"{name}={hashes[name]};".encode())
    return digest.hexdigest()
