"""Arrow schemas of the index rows: the one definition of every stored column.

The DuckDB tables are created from these schemas (``pipelines/stores/duckdb_index.py``) and the
LanceDB table is created with :data:`MEMORIES`, so the stores, the converters and the content
hashes share one column list. Times are ``timestamp('us', tz='UTC')``; a null ``*_to`` column
means "open" (unbounded valid time, or still current in transaction time).
"""

from __future__ import annotations

import pyarrow as pa

EMBEDDING_DIM = 384
"""Width of the memory embeddings (all-MiniLM-L6-v2)."""

TIME = pa.timestamp("us", tz="UTC")

JSON_FIELD = {b"ARROW:extension:name": b"arrow.json", b"ARROW:extension:metadata": b""}
"""Field metadata of a JSON text column (Arrow's canonical ``arrow.json`` extension)."""
LANCE_JSON_FIELD = {b"ARROW:extension:name": b"lance.json", b"ARROW:extension:metadata": b""}
"""How LanceDB stores an ``arrow.json`` column (JSONB)."""


def _f(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


RECORDS = pa.schema([
    _f("event_id", pa.string()),
    _f("tenant", pa.string()),
    _f("agent", pa.string()),
    _f("session", pa.string()),
    _f("subject", pa.string(), True),
    _f("kind", pa.string()),
    _f("occurred_at", TIME),
    _f("vt_from", TIME),
    _f("vt_to", TIME, True),
    _f("tt", TIME),
    _f("partition", pa.int32()),
    _f("offset", pa.int64()),
    _f("payload_json", pa.string()),
    _f("text", pa.string(), True),
    _f("source", pa.string()),
    _f("authority", pa.string()),
    _f("metadata_json", pa.string()),
])
"""One immutable raw record per message, tool call, tool result, observation or note."""

FACT_ENTRIES = pa.schema([
    _f("event_id", pa.string()),
    _f("tenant", pa.string()),
    _f("subject", pa.string()),
    _f("relation", pa.string()),
    _f("object", pa.string(), True),
    _f("op", pa.string()),
    _f("vt_from", TIME),
    _f("vt_to", TIME, True),
    _f("tt", TIME),
    _f("tt_partition", pa.int32()),
    _f("tt_offset", pa.int64()),
])
"""The inputs of the fact timelines: one asserted or retracted fact, as logged."""

FACT_VERSIONS = pa.schema([
    _f("version_id", pa.string()),
    _f("tenant", pa.string()),
    _f("subject", pa.string()),
    _f("relation", pa.string()),
    _f("object", pa.string()),
    _f("vt_from", TIME),
    _f("vt_to", TIME, True),
    _f("tt_from", TIME),
    _f("tt_from_partition", pa.int32()),
    _f("tt_from_offset", pa.int64()),
    _f("tt_to", TIME, True),
    _f("tt_to_partition", pa.int32(), True),
    _f("tt_to_offset", pa.int64(), True),
    _f("source_event_id", pa.string()),
    _f("closed_by_event_id", pa.string(), True),
])
"""Bitemporal fact versions, derived from the entries."""

OFFSETS = pa.schema([
    _f("topic", pa.string()),
    _f("partition", pa.int32()),
    _f("next_offset", pa.int64()),
])
"""Per (topic, partition), the next offset the stores expect: written with the rows."""


def memories_schema(dim: int = EMBEDDING_DIM) -> pa.Schema:
    """Memory rows with their embedding (``fixed_size_list<float32>[dim]``)."""
    return pa.schema([
        _f("memory_id", pa.string()),
        _f("event_id", pa.string()),
        _f("tenant", pa.string()),
        _f("session", pa.string()),
        _f("subject", pa.string(), True),
        _f("kind", pa.string()),
        _f("text", pa.string()),
        _f("vector", pa.list_(pa.float32(), dim)),
        _f("vt_from", TIME),
        _f("vt_to", TIME, True),
        _f("tt_from", TIME),
        _f("tt_to", TIME, True),
        _f("partition", pa.int32()),
        _f("offset", pa.int64()),
        pa.field("metadata_json", pa.string(), nullable=False, metadata=JSON_FIELD),
    ])


def stored_memories_schema(dim: int = EMBEDDING_DIM) -> pa.Schema:
    """:func:`memories_schema` as LanceDB reports it once written: ``metadata_json`` held as
    JSONB (``lance.json`` on ``large_binary``), which LanceDB's ``json_*`` filter functions read
    (see :mod:`memstack.schemas.filters`); reads give it back as JSON text."""
    schema = memories_schema(dim)
    i = schema.get_field_index("metadata_json")
    return schema.set(i, pa.field("metadata_json", pa.large_binary(), nullable=False,
                                  metadata=LANCE_JSON_FIELD))


MEMORIES = memories_schema()
"""The memory rows of the vector and full-text index (384-dim embeddings)."""

PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "records": ("event_id",),
    "fact_entries": ("event_id",),
    "fact_versions": ("version_id",),
    "offsets": ("topic", "partition"),
    "memories": ("memory_id",),
}
"""The key of every table: writes upsert by it, content hashes sort by it."""

EVENT_TABLES: dict[str, pa.Schema] = {
    "records": RECORDS,
    "fact_entries": FACT_ENTRIES,
    "fact_versions": FACT_VERSIONS,
    "offsets": OFFSETS,
}
"""The relational (DuckDB) tables, by name."""
