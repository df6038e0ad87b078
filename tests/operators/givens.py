"""Given/When/Then helpers for the indexing operators: events in, a store's content out.

``tt=k`` positions an event in the log at log time ``T0 + k seconds``, offset ``k`` on the given
partition; ``at(k)`` is that log time, to ask "as known at tt=k". :class:`Store` applies
mutations the way an idempotent sink does (a fake for tests of the pure operators only).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from memstack.operators.log import LoggedEvent, LogPosition
from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import (
    DeleteFactEntry,
    DeleteFactVersion,
    FactEntry,
    FactVersion,
    MemoryRow,
    Mutation,
    PutFactEntry,
    PutFactVersion,
    PutMemory,
    PutRecord,
    RecordRow,
)
from memstack.operators.relations import RelationRegistry
from memstack.schemas.events import (
    Event,
    EventKind,
    FactAssertedPayload,
    FactRetractedPayload,
    Provenance,
)
from memstack.schemas.ids import uuid7

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def year(y: int) -> datetime:
    return datetime(y, 1, 1, tzinfo=UTC)


def at(tt: int) -> datetime:
    """The log time of position ``tt``."""
    return T0 + timedelta(seconds=tt)


def position(tt: int, partition: int = 0) -> LogPosition:
    return LogPosition(at(tt), partition, tt)


def logged(event: Event, tt: int, partition: int = 0) -> LoggedEvent:
    return LoggedEvent(event, position(tt, partition))


def fact(
    subject: str,
    relation: str,
    obj: str,
    *,
    tt: int,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
    partition: int = 0,
    tenant: str = "t1",
) -> LoggedEvent:
    """A logged fact_asserted event (occurred_at = its log time when no valid_from is given)."""
    return _fact_event(EventKind.FACT_ASSERTED, FactAssertedPayload(relation=relation, object=obj),
                       subject, tt=tt, valid_from=valid_from, valid_to=valid_to,
                       partition=partition, tenant=tenant)


def retraction(
    subject: str,
    relation: str,
    obj: str | None = None,
    *,
    tt: int,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
    partition: int = 0,
    tenant: str = "t1",
) -> LoggedEvent:
    return _fact_event(EventKind.FACT_RETRACTED,
                       FactRetractedPayload(relation=relation, object=obj), subject, tt=tt,
                       valid_from=valid_from, valid_to=valid_to, partition=partition,
                       tenant=tenant)


def _fact_event(kind: EventKind, payload: FactAssertedPayload | FactRetractedPayload,
                subject: str, *, tt: int, valid_from: datetime | None,
                valid_to: datetime | None, partition: int, tenant: str) -> LoggedEvent:
    """The envelope both fact givens share: session ``s<partition>``, logged at ``tt``."""
    event = Event(
        event_id=str(uuid7()), tenant=tenant, agent="agent", session=f"s{partition}",
        subject=subject, kind=kind, occurred_at=at(tt), valid_from=valid_from,
        valid_to=valid_to, provenance=Provenance(source="test"), payload=payload,
    )
    return logged(event, tt, partition)


@dataclass
class Store:
    """What an idempotent sink would hold after applying the mutations."""

    records: dict[str, RecordRow] = field(default_factory=dict)
    memories: dict[str, MemoryRow] = field(default_factory=dict)
    entries: dict[str, FactEntry] = field(default_factory=dict)
    versions: dict[str, FactVersion] = field(default_factory=dict)

    def apply(self, mutations: Iterable[Mutation]) -> Store:
        for m in mutations:
            if isinstance(m, PutRecord):
                self.records[m.row.event_id] = m.row
            elif isinstance(m, PutMemory):
                self.memories[m.row.memory_id] = m.row
            elif isinstance(m, PutFactEntry):
                self.entries[m.entry.event_id] = m.entry
            elif isinstance(m, DeleteFactEntry):
                self.entries.pop(m.event_id, None)
            elif isinstance(m, PutFactVersion):
                self.versions[m.row.version_id] = m.row
            else:
                assert isinstance(m, DeleteFactVersion)
                self.versions.pop(m.version_id, None)
        return self

    def facts(self, subject: str, relation: str, tenant: str = "t1") -> list[FactVersion]:
        return [
            v for v in self.versions.values()
            if (v.tenant, v.subject, v.relation) == (tenant, subject, relation)
        ]


def as_of(
    versions: Iterable[FactVersion], vt: datetime, tt: datetime | LogPosition | int
) -> set[str]:
    """Objects valid at ``vt`` as known at ``tt`` (a log time, a log position, or ``tt=k``)."""
    known = at(tt) if isinstance(tt, int) else tt
    out = set()
    for v in versions:
        if not (v.vt_from <= vt and (v.vt_to is None or vt < v.vt_to)):
            continue
        if isinstance(known, LogPosition):
            end = v.tt_to_pos
            seen = v.tt_from_pos <= known and (end is None or known < end)
        else:
            seen = v.tt_from <= known and (v.tt_to is None or known < v.tt_to)
        if seen:
            out.add(v.object)
    return out


class Scenario:
    """Given some logged events, when more arrive (or are forgotten), then the store says..."""

    def __init__(self, registry: RelationRegistry | None = None) -> None:
        self.operator = MemoryOperator(registry)
        self.store = Store()
        self.last: list[Mutation] = []

    def given(self, *events: LoggedEvent) -> Scenario:
        for e in events:
            self.store.apply(self.operator.apply(e))
        return self

    def when(self, *events: LoggedEvent) -> Scenario:
        self.last = []
        for e in events:
            self.last.extend(self.operator.apply(e))
        self.store.apply(self.last)
        return self

    def when_forgotten(self, *events: LoggedEvent) -> Scenario:
        self.last = self.operator.forget(e.event.event_id for e in events)
        self.store.apply(self.last)
        return self

    def value(self, subject: str, relation: str, *, vt: datetime, tt: int) -> set[str]:
        return as_of(self.store.facts(subject, relation), vt, tt)


def build(events: Iterable[LoggedEvent], registry: RelationRegistry | None = None) -> Store:
    """A store built from ``events`` one by one in the given order."""
    return Scenario(registry).given(*events).store
