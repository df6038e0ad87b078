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
   the old segment shared with other live segments (DuckDB packs the small last pieces of a
   row group's columns into one block); its old bytes are still there.
   :func:`release_shared` then makes the checkpoint rewrite those other segments too: a
   column of a row group is rewritten at a checkpoint when one of its values changed, so one
   live row of that row group gets another value and its own back, in one transaction
   (readers never see the other value; an update that keeps the value is skipped by DuckDB
   and rewrites nothing). A block seen free once is clean for good: DuckDB writes a reused
   block whole. Only when a sharing segment is a key column's (an update would re-insert the
   row), or a row group has no live row, does the caller fall back to
   :func:`rewrite_tables`, which rewrites whole tables in place (time linear in them).

The content columns are :data:`CONTENT`; the other columns of a forgotten row (ids, tenant,
session, subject, times) stay in the file until its row group is rewritten.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import duckdb

from memstack.pipelines.stores.duckdb_schema import (
    SECONDARY_INDEXES,
    create_tables,
    ddl,
    q,
)
from memstack.schemas.rows import EVENT_TABLES, PRIMARY_KEYS

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


def _tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [str(t) for (t,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()]


def _placed(table: str) -> str:
    """A subquery of ``table``'s segments, one row per block each uses: ``row_group_id``,
    ``column_name``, ``b`` (the block)."""
    info = f"pragma_storage_info('{table}')"
    return (f"(SELECT row_group_id, column_name, block_id AS b FROM {info} UNION ALL "
            f"SELECT row_group_id, column_name, unnest(additional_block_ids) FROM {info})")


def live_blocks(con: duckdb.DuckDBPyConnection) -> dict[int, set[str]]:
    """Every block a table segment uses, with the tables using it."""
    out: dict[int, set[str]] = {}
    for table in _tables(con):
        rows = con.execute(f"SELECT DISTINCT b FROM {_placed(table)} WHERE b >= 0").fetchall()
        for (block,) in rows:
            out.setdefault(int(block), set()).add(table)
    return out


def shared_blocks(con: duckdb.DuckDBPyConnection, noted: set[int]) -> dict[int, set[str]]:
    """The noted blocks still in use after a checkpoint (their old bytes may remain)."""
    return {b: t for b, t in live_blocks(con).items() if b in noted}


RELEASE_ROUNDS = 3
"""Checkpoints :func:`release_shared` runs before it gives up on a shared block (one sufficed
in every trial at 1M rows: docs/forget.md)."""


def release_shared(con: duckdb.DuckDBPyConnection, noted: set[int]
                   ) -> tuple[dict[int, set[str]], dict[str, float]]:
    """Free the ``noted`` blocks that live segments of other columns still share (module
    docstring, step 3): the segments sharing them are rewritten, row group by row group, and
    checkpointed, until every noted block was seen free. Returns the noted blocks it could not
    free, with their tables (the caller's fallback rewrites those tables), and figures."""
    began = time.monotonic()
    seen_free: set[int] = set()
    figures = {"released_segments": 0.0, "release_rounds": 0.0}
    left: dict[int, set[str]] = {}
    for round_ in range(RELEASE_ROUNDS + 1):
        live = live_blocks(con)
        seen_free |= {b for b in noted if b not in live}
        left = {b: live[b] for b in noted - seen_free}
        if not left or round_ == RELEASE_ROUNDS:
            break
        sharing = _sharing(con, set(left))
        if any(column in _keyed(table) for table, places in sharing.items()
               for _, column in places):
            break
        figures["release_rounds"] += 1
        con.begin()
        try:
            changed = sum(_touch(con, table, places) for table, places in sharing.items())
            con.commit()
        except BaseException:
            con.rollback()
            raise
        figures["released_segments"] += changed
        if changed < sum(len(p) for p in sharing.values()):
            break  # a row group without a live row: its segments cannot be rewritten here
        con.execute("CHECKPOINT")
    figures["release_s"] = time.monotonic() - began
    return left, figures


def _keyed(table: str) -> set[str]:
    """Columns an update cannot rewrite in place: the key, and secondary-indexed ones."""
    return set(PRIMARY_KEYS.get(table, ())) | {
        column for on, column in SECONDARY_INDEXES.values() if on == table}


def _sharing(con: duckdb.DuckDBPyConnection, blocks: set[int]
             ) -> dict[str, set[tuple[int, str]]]:
    """Per table, the (row group, column) whose segments use any of ``blocks``."""
    out: dict[str, set[tuple[int, str]]] = {}
    for table in _tables(con):
        rows = con.execute(
            f"SELECT DISTINCT row_group_id, column_name FROM {_placed(table)} "
            "WHERE b IN (SELECT unnest(?::BIGINT[]))", [sorted(blocks)]).fetchall()
        for group, column in rows:
            out.setdefault(table, set()).add((int(group), str(column)))
    return out


def _touch(con: duckdb.DuckDBPyConnection, table: str, places: set[tuple[int, str]]) -> int:
    """Give one live row of each (row group, column) another value and then its own back, so
    the next checkpoint rewrites that column of that row group; how many were touched."""
    types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                             "WHERE table_name = ?", [table]).fetchall())
    touched = 0
    for group, column in sorted(places):
        row = _live_row(con, table, group)
        if row is None or column not in types:
            continue
        (value,) = con.execute(f"SELECT {q(column)} FROM {q(table)} WHERE rowid = ?",
                               [row]).fetchone() or (None,)
        other = _other(value, str(types[column]))
        if other is None:
            continue
        for v in (other, value):
            con.execute(f"UPDATE {q(table)} SET {q(column)} = ? WHERE rowid = ?", [v, row])
        touched += 1
    return touched


def _live_row(con: duckdb.DuckDBPyConnection, table: str, group: int) -> int | None:
    """The rowid of a live row in row group ``group`` (rowids count every row, deleted ones
    too, in row-group order)."""
    lo, hi = con.execute(
        f"SELECT coalesce(sum(count) FILTER (WHERE row_group_id < ?), 0), coalesce(sum(count) "
        f"FILTER (WHERE row_group_id <= ?), 0) FROM pragma_storage_info('{table}') "
        "WHERE column_id = 0 AND segment_type <> 'VALIDITY'", [group, group]).fetchone() or (0, 0)
    found = con.execute(f"SELECT min(rowid) FROM {q(table)} WHERE rowid >= ? AND rowid < ?",
                        [lo, hi]).fetchone()
    return None if found is None or found[0] is None else int(found[0])


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _other(value: object, data_type: str) -> object:
    """A value of the column's type that differs from ``value`` (None: no such value known)."""
    if value is None:
        return {"VARCHAR": "~", "INTEGER": 0, "BIGINT": 0}.get(
            data_type, _EPOCH if data_type.startswith("TIMESTAMP") else None)
    if isinstance(value, bool):
        return not value
    if isinstance(value, str):
        return value + "~"
    if isinstance(value, int):
        return value - 1 if value > 0 else value + 1
    if isinstance(value, datetime):
        try:
            return value + timedelta(microseconds=1)
        except OverflowError:
            return value - timedelta(microseconds=1)
    return None


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
