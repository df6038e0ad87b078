"""Resolution: one forget request -> its concrete targets (tombstones), along lineage.

event -> its record, its memory row (embedding and full-text entry), its fact entry, and the
fact versions derived from it, recomputed by the facts operator as if the event had never been
seen (so the result equals a build that never saw it). Targets come from the log (envelopes:
sessions of fact events live only there) and from the stores themselves (rows the log copy at
hand might lack), always limited to rows logged no later than the request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memstack.operators.facts import FactOperator
from memstack.operators.forget import ForgetRequest, Subject, Tombstones
from memstack.operators.mutations import FactEntry, Mutation
from memstack.operators.relations import RelationRegistry
from memstack.operators.timeline import FactKey
from memstack.pipelines.forgetting.lance_store import id_filter
from memstack.pipelines.forgetting.lineage import Lineage
from memstack.pipelines.stores import arrow
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.lance_index import LanceVectorIndex, quote

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resolved:
    """Tombstones plus what the audit needs to know about them (kept in memory only)."""

    targets: Tombstones
    known_times: tuple[datetime, ...]


def resolve(request: ForgetRequest, events: DuckDBEventIndex, vectors: LanceVectorIndex,
            lineage: Lineage | None = None,
            registry: RelationRegistry | None = None) -> Resolved:
    """The targets of ``request`` in these stores (and in the log, when given)."""
    registry = registry or RelationRegistry()
    ids: set[str] = set()
    times: set[datetime] = set()
    sessions: set[str] = set()
    for entry in lineage.scoped(request.tenant, request.scope) if lineage is not None else ():
        if request.covers(entry.subject, entry.position.log_time):
            ids.add(entry.subject.event_id)
            times.add(entry.position.log_time)
            if entry.subject.session is not None:
                sessions.add(entry.subject.session)
    texts: list[str] = []
    for row in _records(events, request):
        if request.covers(Subject(row["event_id"], row["tenant"], row["session"],
                                  row["subject"]), row["tt"]):
            ids.add(row["event_id"])
            times.add(row["tt"])
    for row in _memories(vectors, request):
        if request.covers(Subject(row["event_id"], row["tenant"], row["session"],
                                  row["subject"]), row["tt_from"]):
            ids.add(row["event_id"])
            times.add(row["tt_from"])
    entries = [e for e in _fact_entries(events, request, ids)
               if e.event_id in ids or request.covers(Subject.of_entry(e), e.tt.log_time)]
    ids |= {e.event_id for e in entries}
    times |= {e.tt.log_time for e in entries}
    texts += _texts_of(events, vectors, ids) + [e.object for e in entries if e.object]
    keys = frozenset(FactKey.of(e) for e in entries)
    mutations = recompute(events, keys, ids, registry)
    targets = Tombstones(request, frozenset(ids), keys, tuple(mutations),
                         tuple(dict.fromkeys(texts)), frozenset(sessions))
    log.info("resolved %s: %d event(s), %d fact key(s), %d fact mutation(s)",
             request.describe(), len(ids), len(keys), len(mutations))
    return Resolved(targets, tuple(sorted(times)))


def recompute(events: DuckDBEventIndex, keys: Iterable[FactKey], ids: set[str],
              registry: RelationRegistry) -> list[Mutation]:
    """Fact mutations that drop ``ids`` from ``keys``, as the facts operator derives them."""
    stored = events.fact_entries(keys)
    return FactOperator(registry, loader=lambda key: stored[key]).forget(ids, stored)


def _scope_sql(request: ForgetRequest, *, session_col: bool = True) -> tuple[str, list[Any]]:
    """``WHERE`` clause and parameters of the scope's rows (time is checked per row)."""
    s = request.scope
    column, value = {"event": ("event_id", s.event_id), "session": ("session", s.session),
                     "subject": ("subject", s.subject), "fact": ("subject", s.subject)
                     }.get(s.type, ("", None))
    if not column or (column == "session" and not session_col):
        return "tenant = ?", [request.tenant]
    return f"tenant = ? AND {column} = ?", [request.tenant, value or ""]


def _records(events: DuckDBEventIndex, request: ForgetRequest) -> list[dict[str, Any]]:
    if request.scope.type == "fact":
        return []  # fact events make no records
    where, params = _scope_sql(request)
    sql = f"SELECT event_id, tenant, session, subject, tt FROM records WHERE {where}"
    if request.scope.type == "event":  # the key alone, so DuckDB looks it up in its index
        sql = ("WITH k AS MATERIALIZED (SELECT event_id, tenant, session, subject, tt FROM "
               "records WHERE event_id = ?) SELECT * FROM k WHERE tenant = ?")
        params = [request.scope.event_id or "", request.tenant]
    rows: list[dict[str, Any]] = arrow._dicts(events.query(sql, params))
    return rows


def _memories(vectors: LanceVectorIndex, request: ForgetRequest) -> list[dict[str, Any]]:
    s = request.scope
    if s.type == "fact":
        return []
    where = f"tenant = {quote(request.tenant)}"
    if s.type == "event":
        where += f" AND {id_filter([s.event_id or ''])}"
    elif s.type in ("session", "subject"):
        field = s.type
        where += f" AND {field} = {quote(getattr(s, field) or '')}"
    table = vectors.lance_table
    cols = ["event_id", "tenant", "session", "subject", "tt_from"]
    limit = max(1, int(table.count_rows()))
    found = table.search().where(where).select(cols).limit(limit).to_arrow()
    rows: list[dict[str, Any]] = arrow._dicts(found)
    return rows


def _fact_entries(events: DuckDBEventIndex, request: ForgetRequest,
                  ids: set[str]) -> list[FactEntry]:
    where, params = _scope_sql(request, session_col=False)
    if request.scope.type == "session":
        where, params = "event_id IN (SELECT unnest(?))", [sorted(ids)]
    elif request.scope.type == "event":
        wanted = sorted(ids | {request.scope.event_id or ""})
        where, params = "event_id IN (SELECT unnest(?))", [wanted]
    return arrow.to_entries(events.query(f"SELECT * FROM fact_entries WHERE {where}", params))


def _texts_of(events: DuckDBEventIndex, vectors: LanceVectorIndex, ids: set[str]) -> list[str]:
    if not ids:
        return []
    table = events.query("SELECT text FROM records WHERE event_id IN (SELECT unnest(?)) AND "
                  "text IS NOT NULL ORDER BY event_id", [sorted(ids)])
    texts = [t for t in table.column("text").to_pylist() if t]
    texts += [r.text for r in vectors.get(ids)]
    return list(dict.fromkeys(texts))
