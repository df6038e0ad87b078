"""The previous erasure, kept as ``memstack bench forget``'s baseline: whole-store rewrites.

One event forgotten the way the stores did it before bounded erasure (docs/forget.md,
"What bounded the cost"): LanceDB: delete, rewrite every surviving row
(``add(mode="overwrite")``), rebuild every index, drop every older version; DuckDB: delete,
checkpoint, copy the whole database into a fresh file and swap it in.
"""

from __future__ import annotations

import os
import time
import warnings
from datetime import timedelta
from pathlib import Path

import duckdb

from memstack.jobs.measure import Report
from memstack.pipelines.stores.bundle import DUCKDB_FILE, LANCE_DIR
from memstack.pipelines.stores.lance_index import LanceVectorIndex, quote


def full_rewrite_forget(directory: Path, event_id: str, report: Report) -> float:
    """Seconds to forget ``event_id`` from the stores in ``directory`` by full rewrites."""
    began = time.monotonic()
    vectors = LanceVectorIndex(directory / LANCE_DIR)
    table = vectors._table  # the baseline works on the table as the old purge did
    table.delete(f"event_id = {quote(event_id)}")
    table.add(table.to_arrow(), mode="overwrite")
    vectors.maintain(force=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
    lance_s = time.monotonic() - began
    path = directory / DUCKDB_FILE
    con = duckdb.connect(str(path))
    con.execute("DELETE FROM records WHERE event_id = ?", [event_id])
    con.execute("CHECKPOINT")
    con.close()
    fresh = path.with_name(f".{path.name}.compact")
    con = duckdb.connect(str(fresh))
    con.execute(f"ATTACH '{path}' AS old (READ_ONLY)")
    name = con.execute("SELECT current_database()").fetchone()
    con.execute(f'COPY FROM DATABASE old TO "{name[0] if name else "main"}"')
    con.execute("DETACH old")
    con.execute("CHECKPOINT")
    con.close()
    os.replace(fresh, path)
    total = time.monotonic() - began
    report("baseline (full rewrite): %.2f s (LanceDB %.2f s, DuckDB copy %.2f s)", total,
           lance_s, total - lance_s)
    return total
