"""What a tenant's memory holds, and where a row came from: the inspector's reads.

- :func:`subjects`: the tenant's subjects (from fact versions and raw records) with counts and
  their known-time span, and the tenant's whole known-time range (the as-of slider's bounds).
- :func:`provenance`: one event as the stores hold it (its raw record or fact entry, log
  partition, offset and log time) and its lineage: the fact versions it opened, closed and
  whose value it asserted, and its searchable memory row.

Like :mod:`memstack.view.sql`, these read the event index through its read cursor (an MVCC
snapshot, safe while the worker commits); the primitives the store could expose instead are
listed in docs/queries.md ("Store requests"). Every row read is checked to be the tenant's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memstack.foundation.log_coordinates import LoggedAt
from memstack.operators.mutations import FactVersion, MemoryRow, RecordRow
from memstack.pipelines.stores import arrow
from memstack.pipelines.stores.duckdb_schema import q
from memstack.schemas.rows import FACT_VERSIONS
from memstack.view.errors import InvalidQueryError, TenantScopeError
from memstack.view.sql import SqlReader

if TYPE_CHECKING:
    from memstack.pipelines.stores.bundle import Stores

MAX_SUBJECTS = 5000


@dataclass(frozen=True)
class SubjectSummary:
    """One subject of a tenant: how much memory holds about it, and when it learnt it."""

    subject: str
    relations: int
    versions: int
    current: int
    """Versions still current in transaction time (``tt_to`` open)."""
    records: int
    first_known: datetime
    last_known: datetime
    """The latest transaction time that changed anything about the subject."""


@dataclass(frozen=True)
class SubjectsAnswer:
    subjects: list[SubjectSummary]
    known_from: datetime | None
    """The tenant's first transaction time (fact entries and records), None when empty."""
    known_to: datetime | None
    truncated: bool = False


@dataclass(frozen=True)
class FactEntryOut:
    """A fact event as the timeline stores it."""

    subject: str
    relation: str
    object: str | None
    op: str
    vt_from: datetime
    vt_to: datetime | None


@dataclass(frozen=True)
class Provenance:
    """One event and every derived row that comes from it (its lineage in the stores)."""

    event_id: str
    tenant: str
    kind: str
    log: LoggedAt
    record: RecordRow | None
    fact: FactEntryOut | None
    memory: MemoryRow | None
    versions_opened: list[FactVersion]
    """Versions whose transaction time starts at this event (its value and any re-cut)."""
    versions_closed: list[FactVersion]
    """Versions this event's arrival ended in transaction time."""
    versions_asserted: list[FactVersion]
    """Every version (current or closed) that carries the value this event asserted."""


_SUBJECTS_SQL = f"""
WITH v AS (
  SELECT subject, count(DISTINCT relation) AS relations, count(*) AS versions,
         count(*) FILTER (WHERE tt_to IS NULL) AS current, min(tt_from) AS first_known,
         max(coalesce(tt_to, tt_from)) AS last_known
  FROM fact_versions WHERE tenant = ? GROUP BY subject),
r AS (
  SELECT subject, count(*) AS records, min(tt) AS first_known, max(tt) AS last_known
  FROM records WHERE tenant = ? AND subject IS NOT NULL GROUP BY subject)
SELECT coalesce(v.subject, r.subject) AS subject, coalesce(v.relations, 0) AS relations,
       coalesce(v.versions, 0) AS versions, coalesce(v.current, 0) AS current,
       coalesce(r.records, 0) AS records,
       least(coalesce(v.first_known, r.first_known), coalesce(r.first_known, v.first_known))
         AS first_known,
       greatest(coalesce(v.last_known, r.last_known), coalesce(r.last_known, v.last_known))
         AS last_known
FROM v FULL OUTER JOIN r ON v.subject = r.subject
ORDER BY subject LIMIT {MAX_SUBJECTS + 1}
"""

_RANGE_SQL = """
SELECT min(t) AS known_from, max(t) AS known_to FROM (
  SELECT tt AS t FROM fact_entries WHERE tenant = ?
  UNION ALL SELECT tt AS t FROM records WHERE tenant = ?)
"""


def _utc(value: Any) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def subjects(events: SqlReader, tenant: str) -> SubjectsAnswer:
    """The tenant's subjects, by name, and its known-time range."""
    rows = events.query(_SUBJECTS_SQL, [tenant, tenant]).to_pylist()
    found = [SubjectSummary(r["subject"], int(r["relations"]), int(r["versions"]),
                            int(r["current"]), int(r["records"]),
                            r["first_known"].astimezone(UTC), r["last_known"].astimezone(UTC))
             for r in rows[:MAX_SUBJECTS]]
    span = events.query(_RANGE_SQL, [tenant, tenant]).to_pylist()[0]
    return SubjectsAnswer(found, _utc(span["known_from"]), _utc(span["known_to"]),
                          truncated=len(rows) > MAX_SUBJECTS)


_VERSIONS = ", ".join(q(n) for n in FACT_VERSIONS.names)


def provenance(stores: Stores, tenant: str, event_id: str) -> Provenance | None:
    """The event ``event_id`` of ``tenant`` and its lineage; None when no store holds it
    (never written, another tenant's, or forgotten)."""
    if not event_id:
        raise InvalidQueryError("provenance needs an event id")
    events: SqlReader = stores.events
    record = stores.events.record(event_id)
    entry = _entry(events, event_id)
    owner = record.tenant if record is not None else None if entry is None else entry["tenant"]
    if owner is None or owner != tenant:
        return None  # another tenant's event is reported exactly like a missing one
    log, kind, fact = _logged(record, entry)
    versions = arrow.to_versions(events.query(
        f"SELECT {_VERSIONS} FROM fact_versions WHERE tenant = ? AND (source_event_id = ? OR "
        "closed_by_event_id = ? OR (tt_from_partition = ? AND tt_from_offset = ?)) "
        "ORDER BY tt_from, tt_from_partition, tt_from_offset, relation, vt_from, object",
        [tenant, event_id, event_id, log.partition, log.offset]))
    foreign = sorted({v.tenant for v in versions if v.tenant != tenant})
    if foreign:
        raise TenantScopeError(f"provenance for tenant {tenant!r} read versions of {foreign}")
    memories = [m for m in stores.vectors.get([event_id]) if m.tenant == tenant]
    return Provenance(
        event_id, tenant, kind, log, record, fact, memories[0] if memories else None,
        [v for v in versions if (v.tt_from_partition, v.tt_from_offset)
         == (log.partition, log.offset)],
        [v for v in versions if v.closed_by_event_id == event_id],
        [v for v in versions if v.source_event_id == event_id])


def _entry(events: SqlReader, event_id: str) -> dict[str, Any] | None:
    rows = events.query("SELECT * FROM fact_entries WHERE event_id = ?",
                         [event_id]).to_pylist()
    return rows[0] if rows else None


def _logged(record: RecordRow | None,
            entry: dict[str, Any] | None) -> tuple[LoggedAt, str, FactEntryOut | None]:
    if record is not None:
        return LoggedAt(record.partition, record.offset, record.tt), record.kind, None
    assert entry is not None
    fact = FactEntryOut(entry["subject"], entry["relation"], entry["object"], entry["op"],
                        entry["vt_from"].astimezone(UTC), _utc(entry["vt_to"]))
    kind = "fact_asserted" if entry["op"] == "assert" else "fact_retracted"
    return (LoggedAt(int(entry["tt_partition"]), int(entry["tt_offset"]),
                     entry["tt"].astimezone(UTC)), kind, fact)
