"""``MemoryView``: one tenant's memory, queried as of a valid time and a transaction time.

>>> view = MemoryView("acme", stores)                                  # doctest: +SKIP
>>> view.as_of(valid="2024-03-01", known="2024-02-01").facts("user:ana")  # doctest: +SKIP

Every query path filters by the view's tenant inside the store, and every returned row is
checked again here (:func:`_own`): a row of another tenant raises instead of being returned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from memstack.foundation.errors import MemstackError
from memstack.pipelines.stores.arrow import to_memories
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.lance_index import quote
from memstack.schemas.events import TEXT_KINDS
from memstack.schemas.filter_sql import to_lance
from memstack.schemas.filters import matches
from memstack.view import asof as A
from memstack.view.errors import InvalidQueryError, TenantScopeError
from memstack.view.filtering import FilterSpec, as_filter
from memstack.view.fusion import fuse
from memstack.view.points import points_of
from memstack.view.types import AsOf, Context, Fact, LogCut, Record, SearchHit, SearchMode

if TYPE_CHECKING:
    from memstack.operators.mutations import MemoryRow
    from memstack.pipelines.embedding import Encoder
    from memstack.pipelines.service.position import Position
    from memstack.pipelines.stores.bundle import Stores
    from memstack.schemas.filters import Filter
    from memstack.view.context import ContextSource
    from memstack.view.fusion import Fused
    from memstack.view.recall import RecallAnswer, RecallReader
    from memstack.view.search import Ranking
    from memstack.view.state import SessionStateReader, SessionStateView

log = logging.getLogger(__name__)

MIN_CANDIDATES = 40
"""Each retriever returns at least this many prefiltered candidates for fusion."""
CANDIDATE_FACTOR = 4


class _HasTenant(Protocol):
    @property
    def tenant(self) -> str: ...


T = TypeVar("T", bound=_HasTenant)


def _own(rows: Iterable[T], tenant: str, what: str) -> list[T]:
    out = list(rows)
    foreign = sorted({r.tenant for r in out if r.tenant != tenant})
    if foreign:
        raise TenantScopeError(
            f"{what} for tenant {tenant!r} returned rows of {foreign}; nothing was returned. "
            "This is a store bug: report it with the query")
    return out


class MemoryView:
    """The read side of one tenant. Sync and thread-safe (each read uses its own cursor)."""

    def __init__(self, tenant: str, stores: Stores, *, encoder: Encoder | None = None,
                 context_sources: Sequence[ContextSource] | None = None,
                 state: SessionStateReader | None = None,
                 recall: RecallReader | None = None) -> None:
        if not tenant:
            raise InvalidQueryError("a view needs a tenant")
        self.tenant = tenant
        self.stores = stores
        self._encoder = encoder
        self._sources = context_sources
        self._state = state
        self._recall = recall

    def after(self, token: str, *, timeout_s: float = 30.0,
              applied: Callable[[], Position] | None = None) -> MemoryView:
        """This view, once the stores applied ``token`` (a position a write or forget returned;
        ``applied`` gives the stores' position, default: the offsets DuckDB committed).
        Raises ``StoresBehindError`` saying how far behind they are after ``timeout_s``."""
        from memstack.view.after import stores_applied, wait_applied

        wait_applied(applied or stores_applied(self.stores), token, timeout_s,
                     knows_forgets=applied is not None)
        return self

    def session_state(self, session: str) -> SessionStateView:
        """The session's recurrent state: ``.read(query_text, k)`` decodes the nearest items."""
        if self._state is None:
            raise InvalidQueryError("no session-state reader: pass state=SessionStateReader"
                                    ".from_changelog(...) to MemoryView")
        return self._state.session_state(self.tenant, session)

    def recall(self, cue: str, known: datetime | None = None) -> RecallAnswer:
        """Closed-book answer from the consolidated weights as of ``known`` (default: latest)."""
        if self._recall is None:
            raise InvalidQueryError("no recall reader: pass recall=RecallReader(...) to "
                                    "MemoryView (run `memstack consolidate` first)")
        return self._recall.recall(self.tenant, cue, known)

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            from memstack.pipelines.embedding import shared_encoder

            self._encoder = shared_encoder()
        return self._encoder

    @property
    def context_sources(self) -> Sequence[ContextSource]:
        if self._sources is None:
            from memstack.view.context import default_sources

            self._sources = default_sources(self._memory_sources())
        return self._sources

    def _memory_sources(self) -> list[ContextSource]:
        """The read-outs of the session state and the consolidated weights, when given."""
        extra: list[ContextSource] = []
        if self._state is not None:
            from memstack.view.state import SessionStateSource

            extra.append(SessionStateSource(self._state))
        if self._recall is not None:
            from memstack.view.recall import RecalledFacts

            extra.append(RecalledFacts(self._recall))
        return extra

    def as_of(self, valid: datetime | str | None = None,
              known: datetime | LogCut | dict[int, int] | str | None = None) -> AsOfView:
        """A view at ``valid`` time as ``known`` (a time or a log cut); both default to now."""
        return AsOfView(self, A.resolve(valid, known))

    def history(self, subject: str, relation: str | None = None) -> list[Fact]:
        return self.as_of().history(subject, relation)

    def facts(self, subject: str | None = None, relation: str | None = None) -> list[Fact]:
        return self.as_of().facts(subject, relation)

    def search(self, text: str, k: int = 10, **scope: object) -> list[SearchHit]:
        return self.as_of().search(text, k, **scope)  # type: ignore[arg-type]  # same kwargs

    def records(self, session: str | None = None, start: datetime | None = None,
                end: datetime | None = None, limit: int | None = None, *,
                filter: FilterSpec = None) -> list[Record]:
        return self.as_of().records(session, start, end, limit, filter=filter)

    def context(self, text: str, budget_tokens: int = 2000, *, session: str | None = None,
                subject: str | None = None, filter: FilterSpec = None) -> Context:
        return self.as_of().context(text, budget_tokens, session=session, subject=subject,
                                    filter=filter)


class AsOfView:
    """One tenant's memory at fixed ``(valid, known)`` coordinates."""

    def __init__(self, memory: MemoryView, as_of: AsOf) -> None:
        self.memory = memory
        self.tenant = memory.tenant
        self.as_of = as_of

    def facts(self, subject: str | None = None, relation: str | None = None) -> list[Fact]:
        """The fact values valid at ``valid`` as memory knew them at ``known``; a subject's
        from its key index (:mod:`memstack.view.points`), the same rows."""
        events, known = self.memory.stores.events, A.known_of(self.as_of)
        if subject is not None and isinstance(events, DuckDBEventIndex):
            rows = points_of(events).facts(events, self.tenant, subject, relation,
                                           self.as_of.valid, known)
        else:
            rows = events.facts_as_of(self.tenant, subject=subject, relation=relation,
                                      valid=self.as_of.valid, known=known)
        return _own(rows, self.tenant, "facts")

    def history(self, subject: str, relation: str | None = None) -> list[Fact]:
        """Every version of the subject's facts (both intervals), as the timeline was known.

        Versions written after ``known`` are left out, and a close that happened after
        ``known`` is shown as still open: at the default ``known`` (now), the full history.
        """
        rows = self.memory.stores.events.fact_history(self.tenant, subject, relation,
                                                      known=A.known_of(self.as_of))
        return _own(rows, self.tenant, "history")

    def search(self, text: str, k: int = 10, *, kinds: Sequence[str] | None = None,
               session: str | None = None, subject: str | None = None,
               mode: SearchMode = "hybrid", filter: FilterSpec = None,
               ranking: Ranking | None = None) -> list[SearchHit]:
        """Hybrid search over the rows that answer as of: the query's focus, BM25 and vector
        candidates fused by RRF, then the neighbours' shares (:mod:`memstack.view.search`;
        ``ranking`` sets those stages, default :data:`~memstack.view.search.RANKING`).
        ``filter`` (a metadata filter, :mod:`memstack.schemas.filters`) is a scope clause:
        when few of the tenant's rows pass it, they are ranked alone: in the resident search
        index when it is held (its positions), otherwise read first from LanceDB and ranked
        exactly (:mod:`memstack.view.selective`); otherwise both legs and the neighbour stage
        prefilter on it in LanceDB. Every hit's metadata is checked by the filter's Python
        form.

        Each retriever returns slim candidates (id, tenant, session, the as-of columns); the
        full rows are read for the final top ``k`` only. Should the resident search index
        fail while answering, it is dropped (logged, rebuilt later) and the search answers
        through LanceDB.
        """
        from memstack.view.resident.registry import drop_failed

        if k < 1:
            raise InvalidQueryError(f"k={k} must be at least 1")
        if not text.strip():
            raise InvalidQueryError("search text is empty")
        args = (text, k, kinds, session, subject, mode, filter, ranking)
        try:
            return self._search(*args, resident_allowed=True)
        except MemstackError:  # bad input, a tenant's scope, a store's own error
            raise
        except Exception:
            if not drop_failed(self.memory.stores.vectors):
                raise  # not the resident index's failure
            return self._search(*args, resident_allowed=False)

    def _search(self, text: str, k: int, kinds: Sequence[str] | None, session: str | None,
                subject: str | None, mode: SearchMode, filter: FilterSpec,
                ranking: Ranking | None, *, resident_allowed: bool) -> list[SearchHit]:
        from memstack.view import legs, selective
        from memstack.view.resident import Scope, resident_of
        from memstack.view.resident.ranked import ranked
        from memstack.view.search import RANKING, own_table, with_neighbours

        scope = self._scope_clauses(kinds, session, subject, filter)
        n = max(MIN_CANDIDATES, CANDIDATE_FACTOR * k)
        stages = ranking or RANKING
        metadata = as_filter(filter)
        found, broad = None, None
        chosen = None if metadata is None else selective.plan(self, metadata, kinds, session,
                                                               subject)
        resident, only = None, None
        if resident_allowed and (metadata is None or isinstance(chosen, selective.Slice)):
            resident = resident_of(self.memory.stores.vectors)  # no filter or a selective one
        if isinstance(chosen, selective.Slice):  # a selective filter: its rows first
            if resident is not None:
                only = resident.positions_of(chosen.rows.column("memory_id").to_pylist())
            else:
                found = legs.over_slice(self, chosen, text, scope, mode, stages, n)
        elif isinstance(chosen, selective.Members):  # a broad one: kept from the rows ranked
            broad = chosen
        if resident is not None and found is None:  # in positions, no row read but the k
            values = Scope(None if kinds is None else frozenset(kinds), session, subject, only)
            fused, held = ranked(self, resident, text, scope, values, mode, stages, n, k)
            return self._hits(fused, resident.memories([held[f.memory_id] for f in fused]),
                              metadata)
        if found is not None:
            by_text, by_vector, pool = found
        else:
            by_text, by_vector = legs.prefiltered(
                self, text, scope, mode, stages, n,
                None if broad is None else (broad, self._scope_clauses(kinds, session, subject)))
            pool = None
        tables = [t for t in (by_text, by_vector) if t is not None]
        for table in tables:
            own_table(table, self.tenant, "search")
        fused = fuse(legs.candidates(by_text), legs.candidates(by_vector), 2 * n)
        at = {m: r for t in tables
              for m, r in zip(t["memory_id"].to_pylist(), t["_rowid"].to_pylist(), strict=True)}
        known: dict[str, MemoryRow] = {}  # full rows the neighbour stage read already
        if mode == "hybrid":
            fused, around, known = with_neighbours(
                self, fused, at, scope, k, stages.neighbour_weight, pool)
            at.update(around)
        fused = fused[:k]
        ids = [f.memory_id for f in fused]
        vectors = self.memory.stores.vectors
        if pool is not None and "text" in pool.column_names:  # the rows are at hand
            read = to_memories(pool.filter(pc.is_in(pool.column("memory_id"),
                                                    pa.array(ids, pa.string()))))
        else:
            missing = [m for m in ids if m not in known]
            read = [known[m] for m in ids if m in known]
            read += vectors.rows_at([at[m] for m in missing], missing) if missing else []
        return self._hits(fused, read, metadata)

    def _hits(self, fused: list[Fused], read: list[MemoryRow], metadata: Filter | None
              ) -> list[SearchHit]:
        """The hits of ``fused`` whose rows ``read`` holds (a row deleted between the legs
        and the read is gone), each checked for the tenant and by the filter's Python form,
        the judge."""
        rows = {r.memory_id: r for r in _own(read, self.tenant, "search")}
        if metadata is not None:
            rows = {m: r for m, r in rows.items() if matches(metadata, r.metadata)}
        return [SearchHit(f.rank, rows[f.memory_id], f.score) for f in fused
                if f.memory_id in rows]

    def _scope(self, kinds: Sequence[str] | None, session: str | None,
               subject: str | None, filter: FilterSpec = None) -> str:
        """The whole prefilter of a search: as of, and the scope."""
        return " AND ".join([A.memory_predicate(self.as_of),
                             *self._scope_clauses(kinds, session, subject, filter)])

    def _scope_clauses(self, kinds: Sequence[str] | None, session: str | None,
                       subject: str | None, filter: FilterSpec = None) -> list[str]:
        clauses: list[str] = []
        metadata = as_filter(filter)
        if metadata is not None:
            clauses.append(to_lance(metadata))
        if kinds:
            unknown = sorted(set(kinds) - {str(k) for k in TEXT_KINDS})
            if unknown:
                raise InvalidQueryError(
                    f"kinds {unknown} have no text rows; use {sorted(str(k) for k in TEXT_KINDS)}")
            clauses.append(f"kind IN ({', '.join(quote(k) for k in sorted(set(kinds)))})")
        if session is not None:
            clauses.append(f"session = {quote(session)}")
        if subject is not None:
            clauses.append(f"subject = {quote(subject)}")
        return clauses

    def records(self, session: str | None = None, start: datetime | None = None,
                end: datetime | None = None, limit: int | None = None, *,
                filter: FilterSpec = None) -> list[Record]:
        """Raw records in log order that occurred in ``[start, end)`` and answer as of (and
        pass the metadata ``filter``): one DuckDB query with the rule's DuckDB form, so a
        ``limit`` reads and converts only the rows it returns."""
        start = None if start is None else A.aware(start, "start")
        end = None if end is None else A.aware(end, "end")
        rows = self.memory.stores.events.records(
            self.tenant, session=session, limit=limit, filter=as_filter(filter),
            as_of=(self.as_of.valid, A.known_of(self.as_of)), start=start, end=end)
        return _own(rows, self.tenant, "records")

    def context(self, text: str, budget_tokens: int = 2000, *, session: str | None = None,
                subject: str | None = None, filter: FilterSpec = None) -> Context:
        """A prompt-ready context under ``budget_tokens`` (see :mod:`memstack.view.context`)."""
        from memstack.view.context import ContextRequest, assemble

        request = ContextRequest(text, budget_tokens, session, subject, as_filter(filter))
        return assemble(_OneRequest(self.memory, self.as_of), request,
                        self.memory.context_sources)


class _OneRequest(AsOfView):
    """The view one ``context()`` call hands its sources: a search they repeat (the facts
    source asks for the subjects of the hits the relevant source ranks) is run once."""

    def __init__(self, memory: MemoryView, as_of: AsOf) -> None:
        super().__init__(memory, as_of)
        self._searched: dict[tuple[object, ...], list[SearchHit]] = {}

    def search(self, text: str, k: int = 10, *, kinds: Sequence[str] | None = None,
               session: str | None = None, subject: str | None = None,
               mode: SearchMode = "hybrid", filter: FilterSpec = None,
               ranking: Ranking | None = None) -> list[SearchHit]:
        metadata = as_filter(filter)
        key = (text, k, None if kinds is None else tuple(kinds), session, subject, mode,
               metadata, ranking)
        if key not in self._searched:
            self._searched[key] = super().search(text, k, kinds=kinds, session=session,
                                                 subject=subject, mode=mode, filter=metadata,
                                                 ranking=ranking)
        return list(self._searched[key])


"""One retriever: (how many, LanceDB where clause or None) -> candidates, best first
(:data:`~memstack.pipelines.stores.lance_index.CANDIDATE_COLUMNS` and ``score``)."""
