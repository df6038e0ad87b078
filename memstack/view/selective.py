"""Search under a selective metadata filter: the filter's rows first, then exact scoring.

A LanceDB prefilter evaluates ``metadata_json`` row by row (no index reads JSON): at 1M rows a
filter keeping 1 % cost a search ~300 ms. When the tenant's rows that pass the filter are few
(at most :data:`ID_FIRST_MAX`, found by :class:`~memstack.view.metadata_index.MetadataIndex`
from memory), the search (``legs.over_slice``) instead

1. takes those rows from the index (:func:`plan`: every column but ``text`` and
   ``vector``), applies the other scope clauses (``kinds``, ``session``, ``subject``) and the
   as-of predicate (:func:`memstack.view.asof.memory_mask`) to them;
2. reads the ``vector`` (and the ``text``, for the focus and the hits, while they are at most
   :data:`~memstack.view.focus.SAMPLE_ROWS`) of the rows that answer by ``_rowid``, in one
   LanceDB ``take`` (:func:`read`);
3. ranks them: the vector leg exactly (:func:`vector_leg`: cosine over their vectors, no ANN),
   the BM25 leg by LanceDB's full-text search prefiltered on their ``_rowid``
   (:func:`rowid_clause`; under such a prefilter it scores every row it keeps);
4. finds the neighbour rows among the same rows (:func:`neighbour_rows`: they are every row in
   scope that answers as of), with no further read.

Above :data:`ID_FIRST_MAX` rows the filter is a LanceDB prefilter as before (the
:func:`~memstack.schemas.filter_sql.to_lance` form). Nothing here reads rows outside the
filter's: the cost grows with the rows that pass, not with the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memstack.pipelines.stores.lance_index import CANDIDATE_COLUMNS, LanceVectorIndex
from memstack.schemas.filters import Filter
from memstack.view import asof as A
from memstack.view.errors import TenantScopeError
from memstack.view.metadata_index import index_of
from memstack.view.neighbours import WINDOW, Placed

if TYPE_CHECKING:
    from memstack.pipelines.stores.base import Vectors
    from memstack.view.memory_view import AsOfView

ID_FIRST_MAX = 20_000
"""The most rows of a tenant passing a filter for which the search reads them first. Measured
at 1M rows (docs/queries.md, "Filters"): id-first 51 ms p50 at 1k rows, 382 ms at 20k; the
prefilter 350-550 ms at any share; they meet at about 25k rows."""


ID_FIRST_BROAD = 5_000
BROAD_MIN_SHARE = 0.05
"""A filter keeping more than :data:`ID_FIRST_BROAD` rows that are at least this share of the
tenant's is applied by the legs to the rows they rank without it (``1 / share`` times as many,
at most :data:`MAX_RANKED`; when too few of those pass, the leg prefilters). Measured at 1M
rows (docs/queries.md, "Filters"): at 5 % of a tenant (5k rows) id-first was faster, at 10 %
(10k rows) this was."""
MAX_RANKED = 4000
"""The most rows one leg ranks without a broad filter before keeping the filter's."""


@dataclass(frozen=True)
class Slice:
    """The tenant's rows in scope (filter, kinds, session, subject), ascending by ``_rowid``
    (:data:`~memstack.view.metadata_index.ROW_COLUMNS` and ``_rowid``), before the as-of
    predicate, as the metadata index holds them."""

    rows: pa.Table

    def answering(self, view: AsOfView) -> pa.Table:
        return answering(self.rows, view)


def plan(view: AsOfView, metadata: Filter, kinds: Sequence[str] | None,
         session: str | None, subject: str | None) -> Slice | Members | None:
    """How a search applies ``metadata``: a :class:`Slice` (id-first) when at most
    :data:`ID_FIRST_MAX` of the tenant's rows pass it, unless more than
    :data:`ID_FIRST_BROAD` pass and they are at least :data:`BROAD_MIN_SHARE` of the tenant's
    rows: then :class:`Members` (kept from the rows the legs rank without it). None: a LanceDB
    prefilter (more rows pass and they are a smaller share, or the store is not LanceDB's)."""
    vectors = view.memory.stores.vectors
    if not isinstance(vectors, LanceVectorIndex):
        return None
    found = index_of(vectors).select(vectors.lance_table, vectors.uri, view.tenant, metadata,
                                     limit=ID_FIRST_MAX)
    if len(found.rowids) > max(ID_FIRST_BROAD, 0) and found.share >= BROAD_MIN_SHARE:
        return Members(found.rowids, found.share)
    rows = found.rows
    if rows is None:
        return None
    foreign = sorted(set(rows.column("tenant").unique().to_pylist()) - {view.tenant})
    if foreign:  # as search.own_table checks every leg's rows
        raise TenantScopeError(
            f"search for tenant {view.tenant!r} returned rows of {foreign}; nothing was "
            "returned. This is a store bug: report it with the query")
    if kinds:
        rows = rows.filter(pc.is_in(rows.column("kind"), pa.array(sorted(set(kinds)))))
    if session is not None:
        rows = rows.filter(pc.equal(rows.column("session"), session))
    if subject is not None:
        rows = rows.filter(pc.fill_null(pc.equal(rows.column("subject"), subject), False))
    return Slice(rows)


@dataclass(frozen=True)
class Members:
    """A broad filter's rows as ``_rowid`` (ascending) and their share of the tenant's rows:
    the legs rank ``1 / share`` times more rows without the filter and keep these
    (:func:`~memstack.view.legs.leg`)."""

    rowids: np.ndarray[Any, Any]
    share: float

    def mask(self, table: pa.Table) -> pa.Array:
        """Which rows of ``table`` (a ``_rowid`` column) are members."""
        ids = table.column("_rowid").to_numpy()
        if not len(self.rowids) or not len(ids):
            return pa.array(np.zeros(len(ids), dtype=bool))
        at = np.minimum(np.searchsorted(self.rowids, ids), len(self.rowids) - 1)
        return pa.array(self.rowids[at] == ids)


def read(view: AsOfView, rows: pa.Table, columns: Sequence[str]) -> pa.Table | None:
    """``rows`` with ``columns`` read by ``_rowid`` (one LanceDB ``take``). None when a row is
    gone or moved since the index read it (a compaction or a delete: the caller prefilters
    instead). A row id is the row's address in its fragment and fragment ids are never
    reused, so a row read is the row the index holds; each hit's metadata is checked again
    at the end of the search."""
    vectors = view.memory.stores.vectors
    assert isinstance(vectors, LanceVectorIndex)
    if not rows.num_rows:
        empty = vectors.lance_table.schema.empty_table()
        return pa.Table.from_arrays([*rows.columns, *(empty.column(c) for c in columns)],
                                    names=[*rows.column_names, *columns])
    try:
        found = _take(vectors.lance_table, rows.column("_rowid").to_numpy(), columns)
    except (OSError, ValueError, RuntimeError):
        return None
    if found.num_rows != rows.num_rows or found.column("_rowid") != rows.column("_rowid"):
        return None
    out = rows
    for name in columns:
        out = out.append_column(name, found.column(name))
    return out


def _take(table: Any, ids: np.ndarray[Any, Any], columns: Sequence[str]) -> pa.Table:
    """Rows by ``_rowid`` (ascending by it), with ``columns`` and ``_rowid``."""
    found: pa.Table = (table.take_row_ids([int(i) for i in ids]).select(list(columns))
                       .with_row_id().to_arrow())
    return found.sort_by("_rowid")


def vector_leg(rows: pa.Table, vector: Vectors, n: int) -> pa.Table:
    """The top ``n`` of ``rows`` by exact cosine distance to ``vector`` (LanceDB's
    ``1 - cos``), ties by ``_rowid``: :data:`CANDIDATE_COLUMNS`, ``_rowid`` and ``score``."""
    out = rows.select([*CANDIDATE_COLUMNS, "_rowid"])
    if not rows.num_rows:
        return out.append_column("score", pa.array([], pa.float32()))
    flat = rows.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    matrix = np.asarray(flat, dtype=np.float32).reshape(rows.num_rows, -1)
    query = np.asarray(vector, dtype=np.float32).reshape(-1)
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(query))
    distance = 1.0 - (matrix @ query) / np.where(norms > 0, norms, 1.0)
    order = np.lexsort((rows.column("_rowid").to_numpy(), distance))[:n]
    return out.take(pa.array(order)).append_column(
        "score", pa.array(distance[order].astype(np.float32)))


def rowid_clause(rows: pa.Table) -> str:
    """The LanceDB prefilter that keeps exactly ``rows`` (by ``_rowid``)."""
    ids = ", ".join(str(int(i)) for i in rows.column("_rowid").to_numpy())
    return f"_rowid IN ({ids})"


def neighbour_rows(pool: pa.Table, around: Sequence[Placed]) -> pa.Table:
    """The rows of ``pool`` (rows in scope that answer as of) in the session of a row of
    ``around`` and within :data:`~memstack.view.neighbours.WINDOW` of it in valid time."""
    if not around or not pool.num_rows:
        return pool.slice(0, 0)
    sessions = pool.column("session").combine_chunks()
    at = pool.column("vt_from").combine_chunks().cast(pa.int64()).to_numpy(zero_copy_only=False)
    window = WINDOW // _MICROSECOND
    keep = np.zeros(pool.num_rows, dtype=bool)
    for place in around:
        same = pc.equal(sessions, place.session).to_numpy(zero_copy_only=False)
        centre = _micros(place)
        keep |= same & (at >= centre - window) & (at <= centre + window)
    return pool.filter(pa.array(keep))


_MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(place: Placed) -> int:
    return (place.at - _EPOCH) // _MICROSECOND


def answering(rows: pa.Table, view: AsOfView) -> pa.Table:
    """The rows of ``rows`` that answer as of the view's coordinates."""
    return rows.filter(A.memory_mask(rows, view.as_of))
