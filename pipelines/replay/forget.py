"""The forget ledger as the replay sees it: events it covers are never applied.

The ledger is ``<prefix>.forget``, read fully before the replay starts. The resolution of a
forget request belongs to the operators (the tombstone operator); until it is available there,
:class:`ScopeForgetFilter` applies each request's scope to the event envelope directly. Any
object with ``covers(event) -> bool`` can take its place (:class:`ForgetFilter`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from memstack.pipelines.log_reader import read_bounded
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import (
    Event,
    FactAssertedPayload,
    FactRetractedPayload,
    ForgetRequestedPayload,
    ForgetScope,
    parse_event,
)

log = logging.getLogger(__name__)


class ForgetFilter(Protocol):
    """Decides whether a forget request in the ledger covers an event logged at ``log_time``
    (:class:`memstack.pipelines.forgetting.ledger.ForgetLedger` is the real one)."""

    def covers(self, event: Event, log_time: datetime | None = None) -> bool: ...


@dataclass(frozen=True)
class ScopedRequest:
    tenant: str
    scope: ForgetScope


@dataclass(frozen=True)
class ScopeForgetFilter:
    """Covers an event when any request of its tenant names it by scope.

    Scopes: ``event`` (its id), ``session``, ``subject`` (the envelope subject, which is also
    a fact's subject), ``tenant`` (everything of the tenant), ``fact`` (facts with that subject and
    relation, and that object when given).
    """

    requests: tuple[ScopedRequest, ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return len(self.requests)

    def covers(self, event: Event, log_time: datetime | None = None) -> bool:
        """Scope only (no time): a stand-in for tests; the replay uses the ForgetLedger."""
        return any(r.tenant == event.tenant and _scope_covers(r.scope, event)
                   for r in self.requests)


def _scope_covers(scope: ForgetScope, event: Event) -> bool:
    if scope.type == "tenant":
        return True
    if scope.type == "event":
        return event.event_id == scope.event_id
    if scope.type == "session":
        return event.session == scope.session
    if scope.type == "subject":
        return event.subject == scope.subject
    fact = event.payload
    if not isinstance(fact, FactAssertedPayload | FactRetractedPayload):
        return False
    if (event.subject, fact.relation) != (scope.subject, scope.relation):
        return False
    return scope.object is None or fact.object in (None, scope.object)


def requests_of(events: Iterable[Event]) -> ScopeForgetFilter:
    reqs = tuple(ScopedRequest(e.tenant, e.payload.scope) for e in events
                 if isinstance(e.payload, ForgetRequestedPayload))
    return ScopeForgetFilter(reqs)


def load_forget_ledger(bootstrap: str, forget_topic: str) -> ScopeForgetFilter:
    """Read the whole forget ledger (up to its end now) into a filter."""
    events: list[Event] = []
    for record in read_bounded(bootstrap, forget_topic):
        if record.value is None:
            continue
        try:
            events.append(parse_event(record.value))
        except InvalidEventError as exc:
            log.warning("forget ledger: skipping invalid record %d:%d (%s)",
                        record.position.partition, record.position.offset, exc)
    ledger = requests_of(events)
    log.info("forget ledger: %d request(s) from %s", len(ledger), forget_topic)
    return ledger
