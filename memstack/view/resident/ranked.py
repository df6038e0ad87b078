"""A hybrid search over the resident index, in positions from the legs to the final ``k``.

The stages are those of :mod:`memstack.view.search` (focus, both legs, fusion, neighbours), on
the same rules: the legs give positions and scores (:mod:`memstack.view.resident.legs`), fusion
sees their ids and scores (:func:`memstack.view.fusion.fuse`), and the neighbour stage places
rows from the codes held and spreads scores with the rule's numpy form
(:func:`memstack.view.neighbours.spread_held`). No row is read until the view reads the ``k``
it returns; ids are looked up only for the candidates fused and the rows ranked last.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from memstack.view import asof as A
from memstack.view.fusion import Candidate, Fused, fuse
from memstack.view.neighbours import WINDOW, spread_held
from memstack.view.resident.index import ResidentIndex, Scope
from memstack.view.resident.legs import Ranked, legs

if TYPE_CHECKING:
    from memstack.view.memory_view import AsOfView
    from memstack.view.search import Ranking
    from memstack.view.types import SearchMode


def ranked(view: AsOfView, index: ResidentIndex, text: str, where: Sequence[str], scope: Scope,
           mode: SearchMode, stages: Ranking, n: int, k: int
           ) -> tuple[list[Fused], dict[str, int]]:
    """The best ``k`` of a search over ``index`` (``n`` candidates a leg; ``where``: the scope as
    the LanceDB clauses, the focus's cache key) and the positions of their rows."""
    by_text, by_vector = legs(view, index, text, where, scope, mode, stages, n)
    at: dict[str, int] = {}
    lists: list[list[Candidate]] = []
    for leg in (by_text, by_vector):
        lists.append(_candidates(view, index, leg, at) if leg is not None else [])
    fused = fuse(lists[0], lists[1], 2 * n)
    if mode == "hybrid" and stages.neighbour_weight > 0.0 and fused:
        fused = _with_neighbours(view, index, scope, fused, at, k, stages.neighbour_weight)
    fused = fused[:k]
    return fused, {f.memory_id: at[f.memory_id] for f in fused}


def _candidates(view: AsOfView, index: ResidentIndex, leg: Ranked, at: dict[str, int]
                ) -> list[Candidate]:
    from memstack.view.search import own_tenants

    positions, scores = leg
    own_tenants(index.tenants_at(positions), view.tenant, "search")
    ids = index.ids_at(positions)
    at.update(zip(ids, positions.tolist(), strict=True))
    return [Candidate(m, s) for m, s in zip(ids, scores.astype(np.float64).tolist(),
                                            strict=True)]


def _with_neighbours(view: AsOfView, index: ResidentIndex, scope: Scope, fused: list[Fused],
                     at: dict[str, int], k: int, weight: float) -> list[Fused]:
    """:func:`memstack.view.search.with_neighbours` over positions: the rows around the best
    ``k`` (their sessions and times from the codes held), as of, spread in numpy; ``at``
    gains the positions of the rows ranked."""
    from memstack.view.search import AROUND_FACTOR, AROUND_ROWS, best_spread, own_tenants

    best = index.live_at(np.asarray([at[f.memory_id] for f in fused[: AROUND_FACTOR * k]],
                                    dtype=np.int64))
    if not len(best):
        return fused
    sessions, times, _, _ = index.placing(best)
    near = index.placed(view.tenant, scope, sessions, times, WINDOW, AROUND_ROWS)
    own_tenants(index.tenants_at(near), view.tenant, "search")
    near = near[index.answering(near, view.as_of.valid, A.known_of(view.as_of))]
    rows = np.union1d(near, best)
    scored = np.asarray([at[f.memory_id] for f in fused], dtype=np.int64)
    own = np.asarray([f.score.fused for f in fused], dtype=np.float64)
    positions, scores = spread_held(scored, own, rows, *index.placing(rows), weight=weight)
    if len(positions) > k:  # the k best scores and every row tied with the k-th
        kth = np.partition(-scores, k - 1)[k - 1]
        keep = -scores <= kth
        positions, scores = positions[keep], scores[keep]
    ids = index.ids_at(positions)
    at.update(zip(ids, positions.tolist(), strict=True))
    return best_spread(fused, zip(ids, scores.tolist(), strict=True), k)
