"""One tenant's memory over every shard: the query kinds of ``AsOfView``, merged.

How each kind is merged so that it answers what one store holding every partition answers:

- **metadata filters** are row-local: each shard applies the filter (its JSON form travels in
  the request) in its own stores, as the single store does;
- **records**: records are row-local (each answers as of by itself), so the union of the
  shards' answers, sorted in log order (``tt``, partition, offset) and cut to ``limit``, is the
  single store's answer;
- **facts, history**: a fact key's versions are a function of the set of its entries, and its
  entries may sit on several shards (events are keyed by tenant/session, facts by subject).
  The router gathers the entries of the keys asked from every shard, runs the same fact
  operator the projector runs, writes entries and versions into an in-memory DuckDB index and
  asks it with the single store's own query code (:class:`~memstack.view.MemoryView`);
- **search**: the vector leg is row-local (a cosine distance does not depend on other rows):
  each shard's nearest ``n`` merged by distance are the global nearest ``n``. The BM25 leg uses
  statistics summed over all shards (:mod:`memstack.pipelines.shards.bm25`), then both lists
  are fused by the same reciprocal rank fusion as the single store
  (:func:`memstack.view.fusion.fuse`), on ranks over the merged lists;
- **context**: the single store's assembly (:func:`memstack.view.context.assemble`) over this
  view.

Every answer notes the partitions it could not read (``missing``) and those whose shard is
still catching up after a move (``catching_up``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from memstack.operators.facts import FactOperator
from memstack.operators.mutations import FactEntry, MemoryRow, RecordRow
from memstack.pipelines.shards import bm25
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.schemas import filters
from memstack.schemas.events import TEXT_KINDS
from memstack.server.router.fanout import Coverage, Fanout, Gathered
from memstack.server.shards import wire
from memstack.server.shards.reads import ShardSearch
from memstack.view import asof as A
from memstack.view.errors import InvalidQueryError
from memstack.view.filtering import FilterSpec, as_filter
from memstack.view.fusion import Candidate, fuse
from memstack.view.memory_view import CANDIDATE_FACTOR, MIN_CANDIDATES, MemoryView
from memstack.view.types import AsOf, Context, Fact, LogCut, Record, SearchHit, SearchMode

if TYPE_CHECKING:
    from memstack.view.memory_view import AsOfView

ROUTER_TOPIC = "memstack.router"


class _FactsOnly:
    """A stores bundle with only an event index (what facts and history read)."""

    def __init__(self, events: DuckDBEventIndex) -> None:
        self.events = events


class RoutedMemory:
    """The router's counterpart of :class:`MemoryView` (``execute`` runs on it)."""

    def __init__(self, tenant: str, fanout: Fanout, coverage: Coverage | None = None) -> None:
        if not tenant:
            raise InvalidQueryError("a view needs a tenant")
        self.tenant = tenant
        self.fanout = fanout
        self.coverage = coverage
        self.missing: set[int] = set()
        self.catching_up: set[int] = set()

    def as_of(self, valid: datetime | str | None = None,
              known: datetime | LogCut | dict[int, int] | str | None = None) -> RoutedView:
        return RoutedView(self, A.resolve(valid, known))

    def gather(self, read: str, body: dict[str, Any]) -> Gathered:
        """``read`` on every shard, on the coverage of this query's first read."""
        if self.coverage is None:
            self.coverage = self.fanout.coverage()
        found = self.fanout.gather(read, {"tenant": self.tenant, **body}, self.coverage)
        self.missing |= found.missing
        self.catching_up |= found.catching_up
        return found

    def read_one(self, partition: int, read: str, body: dict[str, Any]) -> Any:
        """``read`` on one partition's shard (None, and the partition missing, when it fails)."""
        owner = None if self.coverage is None else self.coverage.owners.get(partition)
        found = None if owner is None else self.fanout.read(owner, partition, read,
                                                            {"tenant": self.tenant, **body})
        if found is None:
            self.missing.add(partition)
        return found

    @property
    def partial(self) -> bool:
        return bool(self.missing or self.catching_up)


class RoutedView:
    """One tenant's memory over all shards at fixed ``(valid, known)`` coordinates."""

    def __init__(self, memory: RoutedMemory, as_of: AsOf) -> None:
        self.memory = memory
        self.tenant = memory.tenant
        self.as_of = as_of

    def _body(self, **extra: Any) -> dict[str, Any]:
        return {"as_of": wire.as_of_json(self.as_of), **extra}

    # -- records -------------------------------------------------------------------------

    def records(self, session: str | None = None, start: datetime | None = None,
                end: datetime | None = None, limit: int | None = None, *,
                filter: FilterSpec = None) -> list[Record]:
        found = self.memory.gather("records", self._body(
            session=session, start=None if start is None else A.aware(start, "start").isoformat(),
            end=None if end is None else A.aware(end, "end").isoformat(),
            filter=_filter_json(filter)))
        rows = [r for part in found.results.values() for r in wire.load(part, list[RecordRow])]
        rows.sort(key=lambda r: (r.tt, r.partition, r.offset))
        return rows if limit is None else rows[:limit]

    # -- facts ---------------------------------------------------------------------------

    def _facts_view(self, subject: str | None, relation: str | None) -> tuple[AsOfView,
                                                                             DuckDBEventIndex]:
        """An as-of view over an in-memory index of the keys' entries from every shard."""
        found = self.memory.gather("fact_entries", {"subject": subject, "relation": relation})
        entries = [e for part in found.results.values()
                   for e in wire.load(part, list[FactEntry])]
        index = DuckDBEventIndex(Path(":memory:"))
        try:
            index.apply(FactOperator().apply_entries(entries), {}, topic=ROUTER_TOPIC)
            local = MemoryView(self.tenant, cast(Any, _FactsOnly(index)))
            return local.as_of(self.as_of.valid, self.as_of.known), index
        except BaseException:
            index.close()
            raise

    def facts(self, subject: str | None = None, relation: str | None = None) -> list[Fact]:
        view, index = self._facts_view(subject, relation)
        try:
            return view.facts(subject, relation)
        finally:
            index.close()

    def history(self, subject: str, relation: str | None = None) -> list[Fact]:
        view, index = self._facts_view(subject, relation)
        try:
            return view.history(subject, relation)
        finally:
            index.close()

    # -- search --------------------------------------------------------------------------

    def search(self, text: str, k: int = 10, *, kinds: Sequence[str] | None = None,
               session: str | None = None, subject: str | None = None,
               mode: SearchMode = "hybrid", filter: FilterSpec = None) -> list[SearchHit]:
        _check_search(text, k, kinds)
        n = max(MIN_CANDIDATES, CANDIDATE_FACTOR * k)
        found = self.memory.gather("search", self._body(
            text=text, n=n, kinds=list(kinds) if kinds else None, session=session,
            subject=subject, mode=mode, filter=_filter_json(filter)))
        parts = {p: wire.load(r, ShardSearch) for p, r in found.results.items()}
        home: dict[str, int] = {}
        rows: dict[str, MemoryRow] = {}
        nearest: list[Candidate] = []
        for partition, part in parts.items():
            home.update((m.memory_id, partition) for m in part.matches)
            for near in part.nearest:
                rows[near.row.memory_id] = near.row
                nearest.append(Candidate(near.row.memory_id, near.distance))
        nearest.sort(key=lambda c: (c.score, c.memory_id))
        texts: list[Candidate] = []
        if mode != "vector":
            stats = bm25.TermStats.total(p.stats for p in parts.values())
            ranked = bm25.rank(stats, (m for p in parts.values() for m in p.matches), n)
            texts = [Candidate(s.memory_id, s.score) for s in ranked]
        fused = fuse(texts, nearest[:n], k)
        self._read_rows([f.memory_id for f in fused if f.memory_id not in rows], home, rows)
        return [SearchHit(f.rank, rows[f.memory_id], f.score) for f in fused
                if f.memory_id in rows]

    def _read_rows(self, ids: list[str], home: dict[str, int],
                   rows: dict[str, MemoryRow]) -> None:
        """Read the full rows of BM25-only hits from the shards that matched them."""
        wanted: dict[int, list[str]] = {}
        for memory_id in ids:
            wanted.setdefault(home[memory_id], []).append(memory_id)
        for partition, some in sorted(wanted.items()):
            found = self.memory.read_one(partition, "rows", {"ids": some})
            rows.update((r.memory_id, r) for r in wire.load(found or [], list[MemoryRow]))

    # -- context -------------------------------------------------------------------------

    def context(self, text: str, budget_tokens: int = 2000, *, session: str | None = None,
                subject: str | None = None, filter: FilterSpec = None) -> Context:
        from memstack.view.context import ContextRequest, assemble, default_sources

        request = ContextRequest(text, budget_tokens, session, subject, as_filter(filter))
        return assemble(cast("AsOfView", self), request, default_sources())


def _filter_json(spec: FilterSpec) -> dict[str, Any] | None:
    """A filter as the shard API carries it: its JSON object (checked here, before any shard
    is asked)."""
    parsed = as_filter(spec)
    return None if parsed is None else filters.to_json(parsed)


def _check_search(text: str, k: int, kinds: Sequence[str] | None) -> None:
    """The single store's refusals (``AsOfView.search``), before asking any shard."""
    if k < 1:
        raise InvalidQueryError(f"k={k} must be at least 1")
    if not text.strip():
        raise InvalidQueryError("search text is empty")
    unknown = sorted(set(kinds or ()) - {str(k) for k in TEXT_KINDS})
    if unknown:
        raise InvalidQueryError(
            f"kinds {unknown} have no text rows; use {sorted(str(k) for k in TEXT_KINDS)}")
