"""The two retrievers of a search, BM25 and vector: their legs, as of, with the scope.

:func:`prefiltered`: each leg with the scope (a metadata filter included) as a LanceDB
prefilter, the as-of predicate applied to its top rows (:func:`leg`). :func:`over_slice`: both
legs over the rows a selective metadata filter keeps (:mod:`memstack.view.selective`). The BM25
leg runs in a worker while the calling thread encodes the query and runs the vector leg.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from memstack.view import asof as A
from memstack.view.focus import SAMPLE_ROWS, focus_over
from memstack.view.fusion import Candidate
from memstack.view.selective import MAX_RANKED

if TYPE_CHECKING:
    from memstack.view.memory_view import AsOfView
    from memstack.view.search import Ranking
    from memstack.view.selective import Members, Slice
    from memstack.view.types import SearchMode

POSTFILTER_FACTOR = 3
"""Each retriever ranks this many times its candidates before the as-of filter (see
:func:`leg`)."""

_Leg = Callable[[int, str | None], pa.Table]


def prefiltered(view: AsOfView, text: str, scope: list[str], mode: SearchMode,
                stages: Ranking, n: int, broad: tuple[Members, list[str]] | None = None
                ) -> tuple[pa.Table | None, pa.Table | None]:
    """Both legs with the scope (and a metadata filter) as a LanceDB prefilter; ``broad``:
    a broad filter's rows and the scope without it (see :func:`leg`)."""
    from memstack.view.search import focused

    vectors = view.memory.stores.vectors
    query = focused(view, text, scope, stages.common_share) if mode == "hybrid" else text
    text_leg: Future[pa.Table] | None = None
    if mode != "vector":  # BM25 in a worker while this thread encodes and runs the ANN leg
        words = fts_text(query)
        text_leg = _pool().submit(leg, view, lambda m, w: vectors.text_candidates(
            words, tenant=view.tenant, k=m, where=w), n, scope, broad)
    try:
        by_vector: pa.Table | None = None
        if mode != "bm25":
            vector = view.memory.encoder.encode([query])[0]
            by_vector = leg(view, lambda m, w: vectors.vector_candidates(
                vector, tenant=view.tenant, k=m, where=w), n, scope, broad)
    finally:
        by_text = None if text_leg is None else text_leg.result()
    return by_text, by_vector


def over_slice(view: AsOfView, chosen: Slice, text: str, scope: list[str],
               mode: SearchMode, stages: Ranking, n: int
               ) -> tuple[pa.Table | None, pa.Table | None, pa.Table] | None:
    """Both legs over a selective filter's rows (:mod:`memstack.view.selective`): the as-of
    predicate on the rows the metadata index holds, BM25 prefiltered on their ``_rowid``,
    exact cosine over their vectors; the rows are the neighbour stage's pool. None when a
    row moved since the index read it (the caller prefilters instead)."""
    from memstack.view import selective

    vectors = view.memory.stores.vectors
    pool = chosen.answering(view)
    texts = mode == "hybrid" and stages.common_share is not None
    columns = ["text"] * texts + ["vector"] * (mode != "bm25")
    sample = pool
    if columns and pool.num_rows <= SAMPLE_ROWS:  # one read: texts, vectors, the hits
        read = sample = selective.read(view, pool, columns)
    elif columns:
        read = selective.read(view, pool, ["vector"]) if mode != "bm25" else pool
        if texts:
            sample = selective.read(view, pool.slice(0, SAMPLE_ROWS), ["text"])
    else:
        read = pool
    if read is None or sample is None:
        return None
    pool = read
    query = text
    if texts:  # the terms common in the rows searched leave the query
        query = focus_over(text, sample.column("text").to_pylist(),
                           stages.common_share)  # type: ignore[arg-type]  # texts
    text_leg: Future[pa.Table] | None = None
    if mode != "vector" and pool.num_rows:
        words, where = fts_text(query), selective.rowid_clause(pool)
        text_leg = _pool().submit(lambda: vectors.text_candidates(
            words, tenant=view.tenant, k=n, where=where))
    try:
        by_vector: pa.Table | None = None
        if mode != "bm25":  # while the BM25 leg runs in a worker
            vector = view.memory.encoder.encode([query])[0]
            by_vector = selective.vector_leg(pool, vector, n)
    finally:
        by_text = None if text_leg is None else text_leg.result()
    return by_text, by_vector, pool


def candidates(table: pa.Table | None) -> list[Candidate]:
    """The leg's rows as fusion candidates (their tenant checked by the caller)."""
    if table is None:
        return []
    return [Candidate(m, float(s)) for m, s in zip(table.column("memory_id").to_pylist(),
                                                  table.column("score").to_pylist(),
                                                  strict=True)]


def leg(view: AsOfView, search: _Leg, n: int, scope: list[str],
        broad: tuple[Members, list[str]] | None = None) -> pa.Table:
    """The top ``n`` candidates of one retriever that answer as of.

    The as-of predicate is applied to the top ``POSTFILTER_FACTOR * n`` rows of the scope
    rather than as a prefilter: its time ranges cost LanceDB 60-80 ms per leg at 1M rows
    (BTREE range scans over the whole table, measured). The rows kept are those the
    prefiltered search ranks first (scores do not depend on the filter), except that
    LanceDB breaks exact score ties differently. When fewer than ``n`` of them answer as
    of (an early ``valid``/``known``), the leg is run again with the full prefilter.

    A broad metadata filter (``broad``: its rows, by ``_rowid``, and the scope without it)
    is applied the same way, to the top ``POSTFILTER_FACTOR * n / share`` rows (at most
    :data:`~memstack.view.selective.MAX_RANKED`) of the scope without it: LanceDB
    evaluates the JSON filter of every row of the tenant (~400 ms a leg at 1M rows).
    """
    fetch, ranked = POSTFILTER_FACTOR * n, scope
    if broad is not None:
        fetch = min(math.ceil(fetch / broad[0].share), MAX_RANKED)
        ranked = broad[1]
    found = search(fetch, " AND ".join(ranked) or None)
    keep = A.memory_mask(found, view.as_of)
    if broad is not None:
        keep = pc.and_(keep, broad[0].mask(found))
    kept = found.filter(keep)
    if kept.num_rows >= n or found.num_rows < fetch:
        return kept.slice(0, n)
    return search(n, " AND ".join([A.memory_predicate(view.as_of), *scope]))


_LEGS: list[ThreadPoolExecutor] = []
_LEGS_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The shared pool that runs the BM25 leg of searches (LanceDB releases the GIL)."""
    with _LEGS_LOCK:
        if not _LEGS:
            _LEGS.append(ThreadPoolExecutor(max_workers=4, thread_name_prefix="memstack-bm25"))
        return _LEGS[0]



def fts_text(text: str) -> str:
    """The words of ``text`` for the full-text parser (its operators and quotes removed)."""
    words = "".join(c if c.isalnum() or c in "'-_" else " " for c in text).split()
    return " ".join(w.strip("'-_") for w in words if w.strip("'-_")) or text.strip()
