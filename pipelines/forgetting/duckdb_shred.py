"""Physical erasure in a live DuckDB file, in time bounded by the rows forgotten, not the file.

Measured on DuckDB 2.0.1 (docs/forget.md, "What each store does physically"): ``DELETE`` only
marks rows deleted, so a checkpoint keeps their strings in the column segments. What works:

1. :func:`blank` (in the erase transaction): note the blocks that hold the content columns'
   segments of the row groups the forgotten rows live in (durably, in :data:`PENDING`, so a
   purge after a restart still knows them), then overwrite those columns of the forgotten rows
   with ``''``, then the caller deletes them. The next checkpoint rewrites those columns of
   those row groups only, without the old strings, and frees the old segments' blocks.
2. :func:`fill_free_blocks` (in the purge): DuckDB never clears a freed block, so a filler
   table of incompressible values as large as the free space is written, checkpointed and
   dropped: every free block now holds filler.
3. :func:`shared_blocks`: a noted block that is still in use after the checkpoint is a block
   the old segment shared with other live segments (DuckDB packs small segments into one
   block); its old bytes are still there. The caller then falls back to
   :func:`rewrite_tables`, which rewrites whole tables in place (time linear in them).

The content columns are :data:`CONTENT`; the other columns of a forgotten row (ids, tenant,
session, subject, times) stay in the file until its row group is rewritten.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import duckdb

from memstack.pipelines.stores.duckdb_schema import create_tables, ddl, q
from memstack.schemas.rows import EVENT_TABLES

PENDING = "forget_purge_pending"
"""Blocks that held forgotten content, noted by the erase, cleared by the purge."""
FILLER = "forget_purge_filler"

CONTENT: dict[str, tuple[str, tuple[str, ...]]] = {
    "records": ("event_id", ("text", "payload_json", "metadata_json")),
    "fact_entries": ("event_id", ("object",)),
    "fact_versions": ("source_event_id", ("object",)),
}
"""Per table: the column naming the forgotten event, and the columns holding its content."""


def blank(con: duckdb.DuckDBPyConnection, ids: list[str]) -> int:
    """Note the blocks of the forgotten rows' content and overwrite that content with ``''``
    (inside the caller's transaction). Returns how many blocks were noted."""
    con.execute(f"CREATE TABLE IF NOT EXISTS {PENDING} (block_id BIGINT NOT NULL)")
    noted = 0
    for table, (key, columns) in CONTENT.items():
        blocks = _content_blocks(con, table, key, columns, ids)
        if blocks:
            con.execute(f"INSERT INTO {PENDING} SELECT unnest(?::BIGINT[])", [sorted(blocks)])
            noted += len(blocks)
        sets = ", ".join(f"{q(c)} = ''" for c in columns)
        con.execute(f"UPDATE {q(table)} SET {sets} WHERE {q(key)} IN (SELECT unnest(?))", [ids])
    return noted


def _content_blocks(con: duckdb.DuckDBPyConnection, table: str, key: str,
                    columns: tuple[str, ...], ids: list[str]) -> set[int]:
    """Blocks holding ``columns`` of the row groups where rows with ``key`` in ``ids`` live
    (their validity segments, which hold no text, left out)."""
    rows = con.execute(
        f"WITH s AS (SELECT * FROM pragma_storage_info('{table}')), "
        "g AS (SELECT row_group_id, sum(count) OVER (ORDER BY row_group_id) - sum(count) "
        "OVER (ORDER BY row_group_id ROWS CURRENT ROW) AS lo, sum(count) OVER "
        "(ORDER BY row_group_id) AS hi FROM (SELECT row_group_id, sum(count) AS count FROM s "
        "WHERE column_id = 0 AND segment_type <> 'VALIDITY' GROUP BY row_group_id)), "
        f"hit AS (SELECT DISTINCT g.row_group_id FROM g JOIN (SELECT rowid AS r FROM {q(table)}"
        f" WHERE {q(key)} IN (SELECT unnest(?))) f ON f.r >= g.lo AND f.r < g.hi) "
        ", c AS (SELECT * FROM s WHERE segment_type <> 'VALIDITY' AND column_name IN (SELECT "
        "unnest(?)) AND row_group_id IN (SELECT * FROM hit)) SELECT DISTINCT b FROM (SELECT "
        "block_id AS b FROM c UNION ALL SELECT unnest(additional_block_ids) FROM c) "
        "WHERE b >= 0", [ids, list(columns)]).fetchall()
    return {int(r[0]) for r in rows}


def pending(con: duckdb.DuckDBPyConnection) -> set[int]:
    """The blocks noted by erases since the last purge (empty when none)."""
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?",
                        [PENDING]).fetchone()
    if found != (1,):
        return set()
    rows = con.execute(f"SELECT DISTINCT block_id FROM {PENDING}").fetchall()
    return {int(r[0]) for r in rows}


def clear_pending(con: duckdb.DuckDBPyConnection, keep: Iterable[int] = ()) -> None:
    """Forget the noted blocks but ``keep`` (still shared, left for a later purge)."""
    con.execute(f"DELETE FROM {PENDING} WHERE block_id NOT IN (SELECT unnest(?::BIGINT[]))",
                [sorted(keep)])


def live_blocks(con: duckdb.DuckDBPyConnection) -> dict[int, set[str]]:
    """Every block a table segment uses, with the tables using it."""
    out: dict[int, set[str]] = {}
    for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary"
                                ).fetchall():
        rows = con.execute(
            f"SELECT DISTINCT b FROM (SELECT block_id AS b FROM pragma_storage_info('{table}') "
            f"UNION ALL SELECT unnest(additional_block_ids) FROM pragma_storage_info('{table}'))"
            " WHERE b >= 0").fetchall()
        for (block,) in rows:
            out.setdefault(int(block), set()).add(str(table))
    return out


def shared_blocks(con: duckdb.DuckDBPyConnection, noted: set[int]) -> dict[int, set[str]]:
    """The noted blocks still in use after a checkpoint (their old bytes may remain)."""
    return {b: t for b, t in live_blocks(con).items() if b in noted}


def fill_free_blocks(con: duckdb.DuckDBPyConnection) -> dict[str, float]:
    """Overwrite every free block with filler: checkpoint (blocks freed by the changes so far
    become free), write filler until no block is free, drop it, checkpoint.

    The filler is ``hash()`` of a counter, 8 incompressible bytes a value; a little more than
    the free space is written, since the checkpoint's own metadata takes blocks too."""
    began = time.monotonic()
    con.execute("CHECKPOINT")
    free = first = _free_blocks(con)
    rounds = 0
    while free and rounds < FILL_ROUNDS:
        rounds += 1
        values = (free + 2 + free // 16) * _block_size(con) // 8
        con.execute(f"{'CREATE TABLE' if rounds == 1 else 'INSERT INTO'} {FILLER} "
                    f"{'AS ' if rounds == 1 else ''}SELECT hash(i + {rounds << 40}) AS v "
                    f"FROM range({values}) t(i)")
        con.execute("CHECKPOINT")
        free = _free_blocks(con)
    if rounds:
        con.execute(f"DROP TABLE {FILLER}")
        con.execute("CHECKPOINT")
    return {"free_blocks": float(first), "unfilled_blocks": float(free),
            "fill_s": time.monotonic() - began}


FILL_ROUNDS = 3
"""Filler rounds before giving up on a free block (``unfilled_blocks`` reports it)."""


def _free_blocks(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT free_blocks FROM pragma_database_size() "
                      "WHERE database_name = current_database()").fetchone()
    return int(row[0]) if row else 0


def _block_size(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT block_size FROM pragma_database_size() "
                      "WHERE database_name = current_database()").fetchone()
    return int(row[0]) if row else 262144


def rewrite_tables(con: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> None:
    """Rewrite whole event tables in place (one transaction): the fallback when the bounded
    path cannot free a block; every old segment of those tables is released."""
    con.begin()
    try:
        for table in sorted(set(tables) & EVENT_TABLES.keys()):
            fresh = f"{table}__rewrite"
            create = ddl(table, EVENT_TABLES[table]).replace(q(table), q(fresh), 1)
            key = create.rindex(", PRIMARY KEY")  # the key is built after the rows: ~20% less
            con.execute(create[:key] + ")")
            con.execute(f"INSERT INTO {q(fresh)} SELECT * FROM {q(table)}")
            con.execute(f"ALTER TABLE {q(fresh)} ADD {create[key + 2:-1]}")
            con.execute(f"DROP TABLE {q(table)}")
            con.execute(f"ALTER TABLE {q(fresh)} RENAME TO {q(table)}")
        create_tables(con)
        con.commit()
    except BaseException:
        con.rollback()
        raise
