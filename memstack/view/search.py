"""How a hybrid search ranks: focus the query, run both retrievers, fuse, spread to neighbours.

1. **Focus** (:mod:`memstack.view.focus`): the terms common in the searched scope leave the
   query both retrievers see.
2. **Retrieve**: BM25 and the vector index each return their top candidates that answer as of
   (``legs.leg``), BM25 in a worker while this thread encodes the query.
3. **Fuse** (:mod:`memstack.view.fusion`): weighted reciprocal rank fusion of the two lists.
4. **Neighbours** (:mod:`memstack.view.neighbours`): the rows around the best fused
   candidates (same session, within the window in valid time, under the same scope and
   as-of predicate) are read, and every row takes a share of its neighbours' scores.

``mode="bm25"`` and ``mode="vector"`` run one retriever on the query as given, with neither
focus nor neighbours: they are the baselines the hybrid ranking is measured against.
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memstack.pipelines.stores.lance_index import quote
from memstack.schemas import asof as rule
from memstack.view import asof as A
from memstack.view.errors import TenantScopeError
from memstack.view.focus import COMMON_SHARE, ScopeTerms, focus
from memstack.view.fusion import Fused
from memstack.view.neighbours import NEIGHBOUR_WEIGHT, WINDOW, Placed, Placements, spread
from memstack.view.selective import neighbour_rows
from memstack.view.types import ScoreParts

if TYPE_CHECKING:
    from memstack.operators.mutations import MemoryRow
    from memstack.pipelines.stores.base import VectorIndex
    from memstack.view.memory_view import AsOfView


@dataclass(frozen=True)
class Ranking:
    """The stages of a hybrid search after fusion: ``common_share`` is the share of the
    scope's rows above which a term leaves the query (None: the query whole);
    ``neighbour_weight`` the share of its neighbours' scores a row takes (0: none).
    :data:`RANKING` is the default; :data:`FUSED_ONLY` is plain fusion of the two legs."""

    common_share: float | None = COMMON_SHARE
    neighbour_weight: float = NEIGHBOUR_WEIGHT


RANKING = Ranking()
FUSED_ONLY = Ranking(common_share=None, neighbour_weight=0.0)

AROUND_FACTOR = 1
"""Neighbours are read around the best ``AROUND_FACTOR * k`` fused candidates."""
AROUND_ROWS = 1000
"""At most this many neighbour rows are read for one search."""

_TERMS: weakref.WeakKeyDictionary[VectorIndex, ScopeTerms] = weakref.WeakKeyDictionary()


def focused(view: AsOfView, text: str, scope: Sequence[str], share: float | None,
            sample: Callable[[int], Sequence[str]] | None = None) -> str:
    """``text`` less the terms in more than ``share`` of the scope's rows (term shares cached
    per store and scope); ``text`` itself when ``share`` is None. ``sample``: the scope's
    first texts (default: read from the vector store)."""
    if share is None:
        return text
    vectors = view.memory.stores.vectors
    terms = _TERMS.get(vectors)
    if terms is None:
        terms = _TERMS.setdefault(vectors, ScopeTerms())
    where = " AND ".join(scope) or None
    shares = terms.shares(f"{view.tenant}\0{where}", sample or (lambda n: vectors.texts(
        tenant=view.tenant, where=where, limit=n)))
    return focus(text, shares, share)


def own_table(table: pa.Table, tenant: str, what: str) -> None:
    """Raise unless every row of ``table`` (a ``tenant`` column) is ``tenant``'s."""
    own_tenants(table.column("tenant").unique().to_pylist(), tenant, what)


def own_tenants(tenants: Sequence[str], tenant: str, what: str) -> None:
    foreign = sorted({t for t in tenants if t != tenant})
    if foreign:
        raise TenantScopeError(
            f"{what} for tenant {tenant!r} returned rows of {foreign}; nothing was returned. "
            "This is a store bug: report it with the query")


def with_neighbours(view: AsOfView, fused: list[Fused], at: dict[str, int],
                    scope: Sequence[str], k: int, weight: float, pool: pa.Table | None = None
                    ) -> tuple[list[Fused], dict[str, int], dict[str, MemoryRow]]:
    """The best ``k`` of ``fused`` re-scored with the neighbours' shares; also the ``_rowid`` of
    every neighbour row read (to read the final rows by) and the full rows it read (the best
    candidates': the final read needs only the others). ``at``: the candidates' row ids.
    ``pool``: every row in scope that answers as of, when the caller holds them (a selective
    filter's rows, :mod:`memstack.view.selective`): the neighbours are found among them.
    The resident index's form, in positions: :mod:`memstack.view.resident.ranked`."""
    if weight <= 0.0 or not fused:
        return fused, {}, {}
    best = [f.memory_id for f in fused[: AROUND_FACTOR * k]]
    known: dict[str, MemoryRow] = {}
    if pool is not None:
        placed = {p.memory_id: p for p in _placed(pool.filter(
            pc.is_in(pool.column("memory_id"), pa.array(best, pa.string()))))}
        around = [placed[m] for m in best if m in placed]
    else:
        read = view.memory.stores.vectors.rows_at([at[m] for m in best], best)
        own_tenants([r.tenant for r in read], view.tenant, "search")
        around = [Placed(r.memory_id, r.session, _aware(r.vt_from), r.partition, r.offset)
                  for r in read]
        known = {r.memory_id: r for r in read}
    if not around:
        return fused, {}, known
    table = (_neighbour_rows(view, around, scope) if pool is None
             else neighbour_rows(pool, around))
    positions = table.column("_rowid").to_numpy().astype(np.int64)
    near = Placements.of_table(table)
    row_ids = dict(zip(near.ids, positions.tolist(), strict=True))
    own = {f.memory_id: f.score.fused for f in fused}
    scores = spread(own, near.plus(Placements.of(around)), weight=weight)
    return best_spread(fused, scores.items(), k), row_ids, known


def best_spread(fused: list[Fused], scores: Iterable[tuple[str, float]], k: int
                ) -> list[Fused]:
    """The best ``k`` of ``scores`` (ids and their scores after the neighbour stage; ties by
    id) as ranked results, each keeping its fusion parts (none for a row that only a
    neighbour brought) and the neighbours' share."""
    parts = {f.memory_id: f.score for f in fused}
    ordered = heapq.nsmallest(k, scores, key=lambda item: (-item[1], item[0]))
    out = []
    for rank, (memory_id, score) in enumerate(ordered, start=1):
        base = parts.get(memory_id, ScoreParts(0.0))
        out.append(Fused(rank, memory_id, replace(base, fused=score,
                                                  neighbours=score - base.fused)))
    return out


def _neighbour_rows(view: AsOfView, around: Sequence[Placed], scope: Sequence[str]) -> pa.Table:
    spans = " OR ".join(
        f"(session = {quote(p.session)} AND vt_from >= {rule.lance_time(p.at - WINDOW)} "
        f"AND vt_from <= {rule.lance_time(p.at + WINDOW)})" for p in around)
    where = " AND ".join([*scope, f"({spans})"])
    table = view.memory.stores.vectors.placed(tenant=view.tenant, where=where,
                                              limit=AROUND_ROWS)
    own_table(table, view.tenant, "search")
    return table.filter(A.memory_mask(table, view.as_of))


def _placed(table: pa.Table) -> list[Placed]:
    columns = [table.column(c).to_pylist()
               for c in ("memory_id", "session", "vt_from", "partition", "offset")]
    return [Placed(str(m), str(s), _aware(t), int(p), int(o))
            for m, s, t, p, o in zip(*columns, strict=True)]


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
