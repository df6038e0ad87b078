"""A full rewrite of a DuckDB file: the offline complement of the bounded in-place erasure.

The in-place erasure (:mod:`memstack.pipelines.stores.duckdb_shred`) frees and shreds the
blocks that held the forgotten rows' segments. DuckDB packs small segments into shared blocks,
and a segment rewritten by an earlier checkpoint (a growing row group) can leave a stale copy
inside a block that stays in use; no bounded step can find those (docs/forget.md, "Limits").
When the stores are not in use (``memstack forget apply``, the evaluation), the file is also
rewritten whole: ``COPY FROM DATABASE`` into a fresh file, fsync, atomic ``os.replace``.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb


def compact_file(path: Path) -> None:
    """Rewrite the live rows of ``path`` into a fresh file and swap it in (nobody may have
    ``path`` open)."""
    fresh = path.with_name(f".{path.name}.{os.getpid()}.compact")
    fresh.unlink(missing_ok=True)
    try:
        con = duckdb.connect(str(fresh))
        try:
            con.execute(f"ATTACH '{path}' AS old (READ_ONLY)")
            name = con.execute("SELECT current_database()").fetchone()
            con.execute(f'COPY FROM DATABASE old TO "{name[0] if name else "main"}"')
            con.execute("DETACH old")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.replace(fresh, path)
        _fsync_dir(path.parent)
    finally:
        fresh.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
