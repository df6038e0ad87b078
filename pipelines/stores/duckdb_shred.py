"""Erasing bytes from a DuckDB file in place: the physical half of an erasure in the event index.

Measured (docs/forget.md, tests/forget/test_physical.py): a ``DELETE`` only marks rows, so a
deleted row's strings stay in its column segment; an ``UPDATE`` makes the next checkpoint write
the updated column's segment of that row group anew, and the old segment's space is freed;
a checkpoint puts wholly freed blocks on the free list, where the bytes stay until reused. Small
segments share a block (DuckDB packs them), and a block is freed only when every segment in it
moved. So an erasure:

1. notes the blocks of the content segments (:data:`CONTENT`) of the row groups that hold the
   rows (:func:`content_blocks`), blanks those columns and deletes the rows (the caller);
2. rewrites every other segment sharing one of those blocks (``UPDATE col = col`` over its
   row group), so the checkpoint frees them whole (:func:`release_blocks`); a primary-key
   column cannot be rewritten in place (DuckDB turns that into delete + insert, leaving copies
   behind), so the table owning it is rebuilt instead (:func:`rebuild_table`, the only step
   whose cost is a table's size);
3. overwrites every free block with incompressible filler (:func:`shred_free_blocks`).

No step copies the file: the cost is the touched row groups' segments and the free space.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

import duckdb

from memstack.pipelines.stores.duckdb_schema import SECONDARY_INDEXES, ddl, q
from memstack.schemas.rows import EVENT_TABLES, PRIMARY_KEYS

log = logging.getLogger(__name__)

CONTENT: dict[str, tuple[str, ...]] = {"records": ("text", "payload_json"),
                                       "fact_entries": ("object",),
                                       "fact_versions": ("object",)}
"""The columns that hold forgettable content, per table."""
ROW_GROUP = 122_880
"""DuckDB's rows per row group (``rowid // ROW_GROUP`` is a row's group in a persistent table)."""
FILLER_TABLE = "_memstack_shred"
NO_COMPRESSION = "fsst,dict_fsst,dictionary,rle,zstd"
"""The string compressions (filler must keep its size; measured names of DuckDB 2.0)."""
ROW_BYTES = 64
"""Filler bytes per row (two md5 digests in hex, incompressible once compression is off)."""
MAX_ROUNDS = 4

Segment = tuple[str, int, str]
"""(table, row group, column)."""


@dataclass(frozen=True)
class Shred:
    """What one physical erasure did."""

    blocks_noted: int
    segments_rewritten: int
    tables_rebuilt: tuple[str, ...]
    blocks_shredded: int

    def figures(self) -> dict[str, float]:
        return {"blocks_noted": float(self.blocks_noted),
                "segments_rewritten": float(self.segments_rewritten),
                "tables_rebuilt": float(len(self.tables_rebuilt)),
                "shredded_blocks": float(self.blocks_shredded)}


def content_blocks(con: duckdb.DuckDBPyConnection, table: str, key: str,
                   ids: list[str]) -> set[int]:
    """The blocks of ``table``'s content segments in the row groups holding rows ``ids``."""
    if not ids or table not in CONTENT:
        return set()
    groups = [int(r[0]) for r in con.execute(
        f"SELECT DISTINCT rowid // {ROW_GROUP} FROM {q(table)} WHERE {q(key)} IN "
        "(SELECT unnest(?))", [ids]).fetchall()]
    if not groups:
        return set()
    rows = con.execute(
        f"SELECT block_id, additional_block_ids FROM pragma_storage_info('{table}') WHERE "
        "block_id >= 0 AND row_group_id IN (SELECT unnest(?)) AND column_name IN "
        "(SELECT unnest(?))", [groups, list(CONTENT[table])]).fetchall()
    out: set[int] = set()
    for block, more in rows:
        out.add(int(block))
        out.update(int(b) for b in (more or []))
    return out


HEADER_BYTES = 3 * 4096
"""DuckDB's file header and its two database headers, before block 0."""


def blocks_holding(path: str, probes: list[bytes], block_size: int) -> set[int]:
    """The blocks of the file at ``path`` whose bytes contain one of ``probes`` (a copy left
    as dead space inside a block in use, e.g. by an earlier rewrite of a small segment)."""
    if not probes:
        return set()
    with open(path, "rb") as fh:
        data = fh.read()
    out: set[int] = set()
    for probe in probes:
        at = data.find(probe)
        while at >= 0:
            if at >= HEADER_BYTES:
                out.add((at - HEADER_BYTES) // block_size)
            at = data.find(probe, at + 1)
    return out


def _segments_by_block(con: duckdb.DuckDBPyConnection) -> dict[int, set[Segment]]:
    out: dict[int, set[Segment]] = defaultdict(set)
    for table in EVENT_TABLES:
        for rg, column, block, more in con.execute(
                "SELECT row_group_id, column_name, block_id, additional_block_ids FROM "
                f"pragma_storage_info('{table}') WHERE block_id >= 0").fetchall():
            for b in (block, *(more or [])):
                out[int(b)].add((table, int(rg), str(column)))
    return out


def release_blocks(con: duckdb.DuckDBPyConnection, blocks: set[int]) -> tuple[int, list[str]]:
    """Make the next checkpoint rewrite every segment stored in ``blocks``, so that all of
    them are freed; then checkpoint. Returns (segments rewritten, tables rebuilt).

    The segments are read before the checkpoint (a freed block may be handed out again by the
    same checkpoint, holding new data). A segment of a primary-key column cannot be rewritten
    in place, so its table is rebuilt.
    """
    used = _segments_by_block(con)
    held = sorted({s for b in blocks & used.keys() for s in used[b]})
    keyed = sorted({t for t, _, c in held if c in PRIMARY_KEYS[t]})
    for table in keyed:
        rebuild_table(con, table)
    rewritten = 0
    for table, group, column in held:
        if table not in keyed:
            con.execute(f"UPDATE {q(table)} SET {q(column)} = {q(column)} WHERE "
                        f"rowid // {ROW_GROUP} = {group}")
            rewritten += 1
    con.execute("CHECKPOINT")
    return rewritten, keyed


def rebuild_table(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Copy ``table`` into a fresh one and drop the old (every block of it is freed)."""
    fresh = f"{table}__rebuild"
    con.begin()
    try:
        con.execute(ddl(table, EVENT_TABLES[table]).replace(q(table), q(fresh), 1))
        con.execute(f"INSERT INTO {q(fresh)} SELECT * FROM {q(table)}")
        con.execute(f"DROP TABLE {q(table)}")
        con.execute(f"ALTER TABLE {q(fresh)} RENAME TO {q(table)}")
        for name, (owner, column) in SECONDARY_INDEXES.items():
            if owner == table:
                con.execute(f"CREATE INDEX IF NOT EXISTS {q(name)} ON {q(table)} ({q(column)})")
        con.commit()
    except BaseException:
        con.rollback()
        raise
    log.info("rebuilt DuckDB table %s to free a shared block of a forgotten row", table)


def shred_free_blocks(con: duckdb.DuckDBPyConnection) -> int:
    """Checkpoint and overwrite every free block of the file; the blocks shredded.

    DuckDB hands out free blocks before it grows the file, so filler as large as the free
    space lands in exactly those blocks; dropping it frees them again, now holding filler.
    """
    con.execute("CHECKPOINT")
    free, block = _sizes(con)
    first = free
    if free == 0:
        return 0
    previous = _setting(con)
    con.execute(f"SET disabled_compression_methods = '{NO_COMPRESSION}'")
    try:
        con.execute(f"CREATE OR REPLACE TABLE {FILLER_TABLE} (x VARCHAR)")
        for _ in range(MAX_ROUNDS):  # metadata may move: fill until no block is free
            rows = free * block // ROW_BYTES + 1
            con.execute(f"INSERT INTO {FILLER_TABLE} SELECT md5(random()::VARCHAR) || "
                        f"md5(random()::VARCHAR) FROM range({rows})")
            con.execute("CHECKPOINT")
            free, _ = _sizes(con)
            if free == 0:
                break
        con.execute(f"DROP TABLE {FILLER_TABLE}")
        con.execute("CHECKPOINT")
    finally:
        con.execute(f"SET disabled_compression_methods = '{previous}'")
    return first


def block_size(con: duckdb.DuckDBPyConnection) -> int:
    return _sizes(con)[1]


def _sizes(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    row = con.execute("SELECT free_blocks, block_size FROM pragma_database_size() "
                      "WHERE database_name = current_database()").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _setting(con: duckdb.DuckDBPyConnection) -> str:
    row = con.execute(
        "SELECT value FROM duckdb_settings() WHERE name = 'disabled_compression_methods'"
    ).fetchone()
    return str(row[0]) if row and row[0] is not None else ""
