"""The per-shard reads the router merges, run in the worker that owns the shard.

Each read answers for one shard only and is row-local where the single-worker query is
(records, the vector leg), or returns what the router needs to compute the answer over all
shards: a key's fact entries (versions are a function of all of a key's entries, which may
sit on several shards) and BM25 statistics with term counts (:mod:`.bm25`).
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from memstack.operators.mutations import FactEntry, MemoryRow, RecordRow
from memstack.pipelines.shards import bm25
from memstack.pipelines.stores import arrow
from memstack.pipelines.stores.lance_index import quote
from memstack.schemas.filter_sql import to_lance
from memstack.schemas.filters import Filter
from memstack.view import asof as A
from memstack.view.memory_view import MemoryView
from memstack.view.types import AsOf

if TYPE_CHECKING:
    from memstack.pipelines.embedding import Encoder
    from memstack.pipelines.stores.bundle import Stores

TEXT_COLUMNS = ("memory_id", "text", "kind", "session", "subject", "vt_from", "vt_to",
                "tt_from", "tt_to", "partition", "offset")
MAX_CACHED_DOCS = 500_000
"""Tokenised rows kept in memory per worker (least recently used evicted)."""


@dataclass(frozen=True)
class Nearest:
    """A vector-leg candidate of one shard: the row and its cosine distance."""

    row: MemoryRow
    distance: float


@dataclass(frozen=True)
class ShardSearch:
    """One shard's part of a search: BM25 statistics and matches, and the nearest rows."""

    stats: bm25.TermStats
    matches: list[bm25.Match]
    nearest: list[Nearest]


class ShardReader:
    """Reads over one shard's stores at a time (thread-safe; tokenised rows are cached)."""

    def __init__(self, encoder: Encoder) -> None:
        self._encoder = encoder
        self._docs: OrderedDict[str, Counter[str]] = OrderedDict()
        self._lock = threading.Lock()

    def records(self, stores: Stores, tenant: str, as_of: AsOf, session: str | None,
                start: datetime | None, end: datetime | None,
                filter: Filter | None = None) -> list[RecordRow]:
        """The shard's records that answer as of (and pass ``filter``), unlimited (the router
        cuts the limit)."""
        view = MemoryView(tenant, stores).as_of(as_of.valid, as_of.known)
        return view.records(session, start, end, filter=filter)

    def fact_entries(self, stores: Stores, tenant: str, subject: str | None,
                     relation: str | None) -> list[FactEntry]:
        """Every stored fact entry of the tenant (and subject, relation) on this shard."""
        sql = ["SELECT * FROM fact_entries WHERE tenant = ?"]
        params: list[Any] = [tenant]
        for column, value in (("subject", subject), ("relation", relation)):
            if value is not None:
                sql.append(f"AND {column} = ?")
                params.append(value)
        sql.append("ORDER BY tt, tt_partition, tt_offset, event_id")
        return arrow.to_entries(stores.events.query(" ".join(sql), params))

    def rows(self, stores: Stores, tenant: str, ids: Sequence[str]) -> list[MemoryRow]:
        return [r for r in stores.vectors.get(ids) if r.tenant == tenant]

    def search(self, stores: Stores, tenant: str, as_of: AsOf, text: str, n: int, *,
               kinds: Sequence[str] | None, session: str | None, subject: str | None,
               mode: str, filter: Filter | None = None) -> ShardSearch:
        nearest: list[Nearest] = []
        if mode != "bm25":
            view = MemoryView(tenant, stores, encoder=self._encoder).as_of(as_of.valid,
                                                                         as_of.known)
            hits = view.search(text, n, kinds=kinds, session=session, subject=subject,
                               mode="vector", filter=filter)
            nearest = [Nearest(h.memory, float(h.score.vector_distance or 0.0)) for h in hits]
        if mode == "vector":
            return ShardSearch(bm25.TermStats(0, 0, {}), [], nearest)
        stats, matches = self._text_leg(stores, tenant, as_of, text, kinds, session, subject,
                                        filter)
        return ShardSearch(stats, matches, nearest)

    def _text_leg(self, stores: Stores, tenant: str, as_of: AsOf, text: str,
                  kinds: Sequence[str] | None, session: str | None, subject: str | None,
                  filter: Filter | None) -> tuple[bm25.TermStats, list[bm25.Match]]:
        """Statistics over the tenant's rows in scope (kinds, session, subject; whatever the
        as-of coordinates), as the resident index counts them; matches among those in scope,
        as of and passing the metadata filter (a LanceDB prefilter of its own)."""
        terms = bm25.query_terms(text)
        table = stores.vectors.scan(f"tenant = {quote(tenant)}", TEXT_COLUMNS)
        ids = table.column("memory_id").to_pylist()
        docs = self._tokenised(ids, table.column("text").to_pylist())
        scope = _scope_mask(table, kinds, session, subject)
        stats = bm25.stats_of([d for d, k in zip(docs, scope.to_pylist(), strict=True) if k],
                              terms)
        mask = pc.and_(A.memory_mask(table, as_of), scope)
        if filter is not None:
            passing = stores.vectors.scan(f"tenant = {quote(tenant)} AND {to_lance(filter)}",
                                          ["memory_id"]).column("memory_id")
            mask = pc.and_(mask, pc.is_in(table["memory_id"], passing.combine_chunks()))
        keep = mask.to_pylist()
        kept = [i for i, k in enumerate(keep) if k]
        return stats, bm25.matches_of([ids[i] for i in kept], [docs[i] for i in kept], terms)

    def _tokenised(self, ids: list[str], texts: list[str]) -> list[Counter[str]]:
        out: list[Counter[str]] = []
        with self._lock:
            for memory_id, text in zip(ids, texts, strict=True):
                doc = self._docs.get(memory_id)
                if doc is None:
                    doc = Counter(bm25.tokens(text))
                    self._docs[memory_id] = doc
                else:
                    self._docs.move_to_end(memory_id)
                out.append(doc)
            while len(self._docs) > MAX_CACHED_DOCS:
                self._docs.popitem(last=False)
        return out


def _scope_mask(table: pa.Table, kinds: Sequence[str] | None, session: str | None,
                subject: str | None) -> pa.ChunkedArray:
    """The search scope of ``AsOfView.search`` (kinds, session, subject), as a mask."""
    mask = pc.is_valid(table["memory_id"])  # every row (ids are never null)
    if kinds:
        mask = pc.and_(mask, pc.is_in(table["kind"], pa.array(sorted(set(kinds)))))
    for column, value in (("session", session), ("subject", subject)):
        if value is not None:
            mask = pc.and_(mask, pc.fill_null(pc.equal(table[column], value), False))
    return mask
