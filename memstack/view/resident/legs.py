"""A search's two retrievers over the resident index (:mod:`memstack.view.resident.index`).

The same legs as :mod:`memstack.view.legs`, answered in memory: the query's focus (its term
shares counted on the scope's first texts, cached as there; under a selective metadata filter
counted for the query's terms on the first texts of the filter's rows, per search), BM25 and
cosine candidates of the tenant and scope, and the as-of predicate
(the one rule, in its numpy form over the held columns) applied to the top
``POSTFILTER_FACTOR * n``; when fewer than ``n`` of those answer, the leg ranks 8 times as
many, until enough answer or none are left. Nothing here is approximate but the vector lists'
probing (:mod:`memstack.view.resident.vector_lists`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from memstack.view import asof as A
from memstack.view.focus import SAMPLE_ROWS, focus_over
from memstack.view.legs import POSTFILTER_FACTOR
from memstack.view.resident.index import ResidentIndex, Scope

if TYPE_CHECKING:
    from memstack.view.memory_view import AsOfView
    from memstack.view.search import Ranking
    from memstack.view.types import SearchMode

GROWTH = 8

Ranked = tuple[npt.NDArray[np.int64], npt.NDArray[Any]]
"""Positions, best first, and their scores."""


def legs(view: AsOfView, index: ResidentIndex, text: str, where: Sequence[str], scope: Scope,
         mode: SearchMode, stages: Ranking, n: int) -> tuple[Ranked | None, Ranked | None]:
    """Both legs (None for a leg ``mode`` leaves out); ``where``: the scope as the LanceDB
    clauses, the key the focus caches its term shares under."""
    from memstack.view.search import focused

    query = text
    if mode == "hybrid" and scope.only is not None and stages.common_share is not None:
        # a selective filter's rows: the query's terms counted on their first texts, per search
        # (filters vary per query; a cache keyed by them would rarely be hit)
        query = focus_over(text, index.texts(view.tenant, scope, SAMPLE_ROWS),
                           stages.common_share)
    elif mode == "hybrid":
        query = focused(view, text, where, stages.common_share,
                        lambda m: index.texts(view.tenant, scope, m))
    by_text = None if mode == "vector" else leg(
        view, index, lambda m: index.text_top(query, view.tenant, scope, m), n)
    by_vector = None
    if mode != "bm25":
        vector = view.memory.encoder.encode([query])[0]
        by_vector = leg(view, index, lambda m: index.vector_top(vector, view.tenant, scope, m),
                        n)
    return by_text, by_vector


def leg(view: AsOfView, index: ResidentIndex, search: Callable[[int], Ranked], n: int
        ) -> Ranked:
    """The top ``n`` candidates of one retriever that answer as of (the rule's numpy form
    over the positions; no row is read), best first."""
    fetch = POSTFILTER_FACTOR * n
    valid, known = view.as_of.valid, A.known_of(view.as_of)
    while True:
        at, scores = search(fetch)
        keep = index.answering(at, valid, known)
        if int(keep.sum()) >= n or len(at) < fetch:
            return at[keep][:n], scores[keep][:n]
        fetch *= GROWTH
