"""The resident search index: a search's candidates, neighbours and rows without a query plan.

LanceDB holds the ``memories`` (durable, rebuilt by replay, forgotten by the forget store).
A search through it costs ~120 ms of CPU at 100k rows (measured, docs/queries.md): every
query pays LanceDB's planning and scan set-up for each of the two retrievers, the neighbour
rows and the final rows. This index holds a copy of the rows in the searching process
(:class:`~memstack.view.resident.rows.ResidentRows`), their BM25 postings
(:class:`~memstack.view.resident.postings.Postings`) and their vectors
(:class:`~memstack.view.resident.vector_lists.VectorLists`), kept at the version the table
reads by its fragments (:class:`~memstack.view.resident.follow.FragmentFollower`) before
each search. The as-of predicate, the scope and the tenant check are the view's, unchanged.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from memstack.operators.mutations import MemoryRow
from memstack.pipelines.shards import bm25
from memstack.pipelines.stores.lance_index import CANDIDATE_COLUMNS
from memstack.schemas.asof import Known
from memstack.view.resident.follow import FragmentFollower, Step
from memstack.view.resident.postings import Postings
from memstack.view.resident.rows import Mask, Positions, ResidentRows
from memstack.view.resident.vector_lists import VectorLists

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def _locked(method: F) -> F:
    """``method`` under the index's lock (a refresh appends and kills rows)."""
    @functools.wraps(method)
    def run(self: ResidentIndex, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)
    return cast(F, run)


@dataclass(frozen=True)
class Scope:
    """A search's scope clauses, as values: kinds, session, subject (None: any); ``only``:
    the positions a selective metadata filter keeps (:meth:`ResidentIndex.positions_of`),
    None for no filter."""

    kinds: frozenset[str] | None = None
    session: str | None = None
    subject: str | None = None
    only: Positions | None = field(default=None, compare=False)


EXACT_ONLY = 50_000
"""A filter keeping at most this many rows has their vectors scored exactly (no probing)."""


class ResidentIndex:
    """One ``memories`` table's rows, postings and vectors in this process."""

    def __init__(self, dim: int) -> None:
        self.rows = ResidentRows()
        self.postings = Postings()
        self.vectors = VectorLists(dim)
        self._follow = FragmentFollower()
        self.lock = threading.RLock()
        self.last = Step(0, 0, 0)
        self.ready = False
        """Whether the copy has followed the table once (a background build is done)."""
        self.building = False
        """Whether a background thread builds the copy (searches that do not wait skip it)."""

    # -- keeping current -------------------------------------------------------------------

    def refresh(self, table: Any, uri: str) -> None:
        """Bring the copy to the version ``table`` (a LanceDB table) reads."""
        with self.lock:
            version = int(table.version)
            if version != self._follow.version:
                began = time.perf_counter()
                self.last = self._follow.refresh(uri, version, self._alive_position,
                                                 self._append, self._kill)
                if self.last.fragments_read:
                    log.debug("resident index at version %d: %s in %.1f ms", version,
                              self.last, (time.perf_counter() - began) * 1000)
            self.ready = True

    def _alive_position(self, memory_id: str) -> int | None:
        at = self.rows.ids.get(memory_id)
        return at if at is not None and self.rows.alive.view()[at] else None

    def _append(self, table: pa.Table) -> Positions:
        positions, added = self.rows.append(table)
        if len(positions) != table.num_rows:
            raise ValueError(f"{table.num_rows} rows read, {len(positions)} new: the table "
                             "holds an id twice or the resident index is out of step")
        tenants = self.rows.tenant.view()[positions].tolist()
        self.postings.append(positions, added.column("text").to_pylist(), tenants)
        vectors = table.column("vector").combine_chunks()
        flat = vectors.values.to_numpy(zero_copy_only=False).reshape(len(vectors), -1)
        self.vectors.append(positions, flat)
        return positions

    def _kill(self, positions: Positions) -> None:
        """Rows that left the table die, and their content leaves this copy: their texts and
        metadata are blanked, their postings removed, their vectors zeroed (a forget's erase
        reaches the copy at the next search, not at its next rebuild)."""
        alive = self.rows.alive.view()
        positions = positions[alive[positions]]
        if not len(positions):
            return
        alive[positions] = False
        texts = self.rows.take(positions, ["text"]).column("text").to_pylist()
        self.postings.forget(positions, self.rows.tenant.view()[positions], texts)
        self.rows.blank(positions)
        self.vectors.zero(positions)

    # -- reads (each under :attr:`lock`) ---------------------------------------------------

    def scope_mask(self, tenant: str, scope: Scope) -> Mask | None:
        """The positions of the tenant's live rows in ``scope``; None when nothing can match
        (a tenant, session, kind or subject never seen)."""
        rows = self.rows
        t = rows.tenants.get(tenant)
        session = rows.sessions.get(scope.session) if scope.session is not None else -2
        subject = rows.subjects.get(scope.subject) if scope.subject is not None else -2
        kinds = None
        if scope.kinds is not None:
            kinds = np.array([c for k in scope.kinds if (c := rows.kinds.get(k)) is not None],
                             dtype=np.int16)
            if not len(kinds):
                return None
        if t is None or session is None or subject is None:
            return None
        tenant_of, alive = rows.tenant.view(), rows.alive.view()
        session_of, subject_of, kind_of = rows.session.view(), rows.subject.view(), \
            rows.kind.view()

        member = None
        if scope.only is not None:
            member = np.zeros(rows.count, dtype=bool)
            member[scope.only] = True

        def mask(at: Positions) -> npt.NDArray[np.bool_]:
            keep: npt.NDArray[np.bool_] = (tenant_of[at] == t) & alive[at]
            if member is not None:
                keep &= member[at]
            if session != -2:
                keep &= session_of[at] == session
            if subject != -2:
                keep &= subject_of[at] == subject
            if kinds is not None:
                keep &= np.isin(kind_of[at], kinds)
            return keep

        return mask

    @_locked
    def text_top(self, query: str, tenant: str, scope: Scope, n: int
                 ) -> tuple[Positions, npt.NDArray[np.float64]]:
        """The tenant's top ``n`` positions in scope by BM25, best first, with their scores."""
        mask = self.scope_mask(tenant, scope)
        t = self.rows.tenants.get(tenant)
        if mask is None or t is None:
            return np.empty(0, np.int64), np.empty(0)
        whole = scope.only is None and scope == Scope()  # the tenant's every live row
        return self.postings.top(bm25.tokens(query), self._universe(t, scope, mask), mask, n,
                                 (t, self.rows.tenant.view()) if whole else None)

    def text_candidates(self, query: str, tenant: str, scope: Scope, n: int) -> pa.Table:
        """:meth:`text_top` as candidates (:data:`CANDIDATE_COLUMNS`, ``_rowid`` = position,
        ``score``)."""
        return self.candidates(*self.text_top(query, tenant, scope, n))

    def _universe(self, tenant: int, scope: Scope, mask: Mask) -> tuple[int, int]:
        """The scope's live rows: how many, and their summed length (a session's rows are
        counted from its own list; kinds or a subject alone count over every row)."""
        if scope.only is not None:
            rows = scope.only[mask(scope.only)]
            return len(rows), int(self.postings.length.view()[rows].sum())
        if scope == Scope():
            return self.postings.tenant(tenant)
        code = None if scope.session is None else self.rows.sessions.get(scope.session)
        rows = (self.rows.session_order(code) if code is not None
                else np.arange(self.rows.count, dtype=np.int64))
        rows = rows[mask(rows)]
        return len(rows), int(self.postings.length.view()[rows].sum())

    @_locked
    def vector_top(self, vector: npt.ArrayLike, tenant: str, scope: Scope, n: int
                   ) -> tuple[Positions, npt.NDArray[np.float32]]:
        """The tenant's ``n`` positions in scope nearest to ``vector``, nearest first, with
        their cosine distances."""
        mask = self.scope_mask(tenant, scope)
        if mask is None:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        if scope.only is not None and len(scope.only) <= EXACT_ONLY:
            return self.vectors.exact(vector, scope.only[mask(scope.only)], n)
        return self.vectors.nearest(vector, mask, n)

    def vector_candidates(self, vector: npt.ArrayLike, tenant: str, scope: Scope,
                          n: int) -> pa.Table:
        """:meth:`vector_top` as candidates (cosine distance as ``score``)."""
        return self.candidates(*self.vector_top(vector, tenant, scope, n))

    @_locked
    def answering(self, positions: Positions, valid: datetime, known: Known
                  ) -> npt.NDArray[np.bool_]:
        """Which rows at ``positions`` answer as of ``(valid, known)`` (the as-of rule)."""
        return self.rows.answering(positions, valid, known)

    @_locked
    def live_at(self, positions: Positions) -> Positions:
        """Those of ``positions`` whose rows are alive, in order."""
        alive: Positions = positions[self.rows.alive.view()[positions]]
        return alive

    @_locked
    def tenants_at(self, positions: Positions) -> list[str]:
        """The distinct tenants of the rows at ``positions``."""
        codes = np.unique(self.rows.tenant.view()[positions]).tolist()
        return [self.rows.tenants.values[c] for c in codes]

    @_locked
    def positions_of(self, memory_ids: Sequence[str]) -> Positions:
        """The positions held for ``memory_ids``, ascending (an id not held is left out; a
        dead row's position is kept: the scope's mask leaves it out)."""
        ids = self.rows.ids
        found = [at for m in memory_ids if (at := ids.get(m)) is not None]
        return np.sort(np.asarray(found, dtype=np.int64))

    @_locked
    def memories(self, positions: Sequence[int]) -> list[MemoryRow]:
        """The live rows at ``positions``, in that order (a row that died since its position
        was found is left out, as a row deleted from the table between a search's legs and
        its final read)."""
        at = np.asarray(positions, dtype=np.int64)
        return self.rows.memory_rows(at[self.rows.alive.view()[at]])

    @_locked
    def candidates(self, at: Positions, scores: npt.NDArray[Any]) -> pa.Table:
        """The rows at ``at`` as candidates of a leg (:data:`CANDIDATE_COLUMNS`, ``_rowid`` =
        position, ``score``)."""
        table = self.rows.take(at, CANDIDATE_COLUMNS)
        return table.append_column("score", pa.array(scores.astype(np.float32)))

    @_locked
    def placed(self, tenant: str, scope: Scope, sessions: Positions, at: Positions,
               window: timedelta, limit: int) -> Positions:
        """The positions of the tenant's rows in scope in each session of ``sessions`` (codes,
        :meth:`placing`) within ``window`` of the valid time ``at`` (microseconds) beside it,
        ascending; at most ``limit`` (the first ones)."""
        mask = self.scope_mask(tenant, scope)
        if mask is None:
            return np.empty(0, np.int64)
        spans: dict[int, list[tuple[int, int]]] = {}
        span = int(window / timedelta(microseconds=1))
        for code, when in zip(sessions.tolist(), at.tolist(), strict=True):
            times = self.rows.session_times(code)
            spans.setdefault(code, []).append((
                int(np.searchsorted(times, when - span, side="left")),
                int(np.searchsorted(times, when + span, side="right"))))
        found: list[Positions] = []
        for code, ranges in spans.items():  # each session's windows, overlaps merged
            order = self.rows.session_order(code)
            ranges.sort()
            lo, hi = ranges[0]
            for a, b in [*ranges[1:], (len(order) + 1, 0)]:
                if a > hi:
                    near = order[lo:hi]
                    found.append(near[mask(near)])
                    lo, hi = a, b
                else:
                    hi = max(hi, b)
        chosen = np.concatenate(found) if found else np.empty(0, np.int64)
        if len(chosen) > limit:  # the first ``limit`` without sorting the rest
            chosen = np.partition(chosen, limit - 1)[:limit]
        return np.sort(chosen)

    @_locked
    def placing(self, positions: Positions
                ) -> tuple[Positions, Positions, Positions, Positions]:
        """Where the rows at ``positions`` lie: their session codes, valid times
        (microseconds), partitions and offsets."""
        held = self.rows.as_of
        return (self.rows.session.view()[positions].astype(np.int64),
                self.rows.vt_from.view()[positions], held["partition"].view()[positions],
                held["offset"].view()[positions])

    @_locked
    def ids_at(self, positions: Positions) -> list[str]:
        """The ids of the rows at ``positions``."""
        ids = self.rows.id_of
        return [ids[p] for p in positions.tolist()]

    @_locked
    def texts(self, tenant: str, scope: Scope, limit: int) -> list[str]:
        """Up to ``limit`` texts of the tenant's live rows in scope, the first ones held."""
        mask = self.scope_mask(tenant, scope)
        if mask is None:
            return []
        at = np.arange(self.rows.count, dtype=np.int64) if scope.only is None else scope.only
        chosen = at[mask(at)][:limit]
        return [str(t) for t in self.rows.take(chosen, ["text"]).column("text").to_pylist()]
