"""How ``memstack bench query`` loads its search corpus: most rows in bulk, indexed at once, then
the rest as the live writer writes them, so searches fan out over the index segments a live
Lance table has (docs/stores.md, "Index segments and the tiered merge policy")."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import lance

from memstack.jobs.measure import Report
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.lance_index import LanceVectorIndex
from memstack.pipelines.stores.lance_segments import segment_rows

if TYPE_CHECKING:
    from memstack.jobs.bench.query import Corpus

STEADY_SHARE, STEADY_WRITE = 25, 64
"""The last ``rows // STEADY_SHARE`` rows are written as the live writer writes (``STEADY_WRITE``
at a time, maintenance after each): searches fan out over a live table's index segments."""


def build_memories(stores: Stores, corpus: Corpus, rows: int,
                   report: Report) -> dict[str, float]:
    bulk = rows - rows // STEADY_SHARE
    began = time.monotonic()
    for lo in range(0, bulk, 50_000):
        hi = min(bulk, lo + 50_000)
        stores.vectors.merge(corpus.rows(lo, hi), corpus.vectors[lo:hi], maintain=False)
    report("search: wrote %d memories in %.1f s", bulk, time.monotonic() - began)
    began = time.monotonic()
    done = stores.vectors.maintain(force=True)
    report("search: built indexes %s in %.1f s", list(done.built), time.monotonic() - began)
    began, segments = time.monotonic(), 0
    for lo in range(bulk, rows, STEADY_WRITE):
        stores.vectors.merge(corpus.rows(lo, min(rows, lo + STEADY_WRITE)),
                             corpus.vectors[lo:lo + STEADY_WRITE])
    steady_s = time.monotonic() - began
    if isinstance(stores.vectors, LanceVectorIndex):
        segments = max(len(s) for s in segment_rows(lance.dataset(stores.vectors.uri)).values())
    report("search: ingested %d more in writes of %d with maintenance in %.1f s; the indexes "
           "have up to %d segments", rows - bulk, STEADY_WRITE, steady_s, segments)
    return {"steady_ingest_rows_per_s": (rows - bulk) / steady_s,
            "search_index_segments": float(segments)}
