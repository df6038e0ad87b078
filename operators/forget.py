"""Forget requests as pure values: scope predicates, the ledger model and tombstones.

A forget request names a scope inside its tenant (an event, a session, a subject, the whole
tenant, or a fact pattern ``(subject, relation[, object])``). It **covers** the events of that
scope whose log time is ``<=`` the request's own log time; events of the same scope logged later
are new data and stay. Every consumer (resolution against the stores, the projectors' ledger
filter, the audit) asks :func:`scope_covers` / :meth:`ForgetRequest.covers`, so "what is
forgotten" has one definition.

Pure: no I/O, no store or broker imports. ``pipelines/forgetting`` binds it to the stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from memstack.foundation.errors import MemstackError
from memstack.operators.log import LoggedEvent, LogPosition
from memstack.operators.mutations import FactEntry, Mutation
from memstack.operators.timeline import FactKey
from memstack.schemas.events import (
    Envelope,
    Event,
    FactAssertedPayload,
    FactRetractedPayload,
    ForgetRequestedPayload,
    ForgetScope,
)

KEY_SCOPES = frozenset({"session", "subject", "tenant"})
"""Scopes whose data keys are destroyed (crypto-shredding); ``event`` and ``fact`` are narrower
than a key and rely on the ledger filter."""


class NotAForgetRequestError(MemstackError, ValueError):
    """The event is not a forget_requested event; only those go to ``<prefix>.forget``."""


@dataclass(frozen=True)
class Subject:
    """The fields a scope predicate reads, from an event envelope or from a stored row.

    ``relation``/``object``/``is_fact`` are set only for fact events (and fact entries);
    ``object`` is None for a retraction that names no value.
    """

    event_id: str
    tenant: str
    session: str | None
    subject: str | None
    is_fact: bool = False
    relation: str | None = None
    object: str | None = None

    @classmethod
    def of_event(cls, event: Envelope) -> Subject:
        """From an envelope; fact fields need the payload (an opened :class:`Event`)."""
        payload = event.payload if isinstance(event, Event) else None
        if isinstance(payload, FactAssertedPayload | FactRetractedPayload):
            return cls(event.event_id, event.tenant, event.session, event.subject, True,
                       payload.relation, payload.object)
        return cls(event.event_id, event.tenant, event.session, event.subject)

    @classmethod
    def of_entry(cls, entry: FactEntry, session: str | None = None) -> Subject:
        return cls(entry.event_id, entry.tenant, session, entry.subject, True, entry.relation,
                   entry.object)


def scope_covers(scope: ForgetScope, tenant: str, item: Subject) -> bool:
    """True when ``item`` falls under ``scope`` of a request made in ``tenant`` (time aside).

    A fact pattern with an object covers the entries naming that object; a retraction that
    names no object carries no forgotten value and is kept (it only ends validity).
    """
    if item.tenant != tenant:
        return False
    kind = scope.type
    if kind == "tenant":
        return True
    if kind == "event":
        return item.event_id == scope.event_id
    if kind == "session":
        return item.session == scope.session
    if kind == "subject":
        return item.subject == scope.subject
    if not item.is_fact or (item.subject, item.relation) != (scope.subject, scope.relation):
        return False
    return scope.object is None or item.object == scope.object


@dataclass(frozen=True)
class ForgetRequest:
    """One forget request as logged in ``<prefix>.forget``: its id, scope and log position."""

    request_id: str
    tenant: str
    scope: ForgetScope
    position: LogPosition
    reason: str | None = None

    @property
    def log_time(self) -> datetime:
        return self.position.log_time

    @property
    def destroys_keys(self) -> bool:
        return self.scope.type in KEY_SCOPES

    def covers(self, item: Subject, log_time: datetime | None) -> bool:
        """In scope and logged no later than the request (``None``: time unknown, in scope)."""
        if log_time is not None and log_time > self.log_time:
            return False
        return scope_covers(self.scope, self.tenant, item)

    def covers_event(self, logged: LoggedEvent) -> bool:
        return self.covers(Subject.of_event(logged.event), logged.position.log_time)

    def describe(self) -> str:
        s = self.scope
        detail = {"event": s.event_id, "session": s.session, "subject": s.subject,
                  "tenant": self.tenant,
                  "fact": f"({s.subject}, {s.relation}, {s.object or '*'})"}[s.type]
        return f"{s.type} {detail} of tenant {self.tenant}"


def request_of(logged: LoggedEvent) -> ForgetRequest:
    """The request carried by a logged forget_requested event."""
    payload = logged.event.payload
    if not isinstance(payload, ForgetRequestedPayload):
        raise NotAForgetRequestError(
            f"event {logged.event.event_id} of kind '{logged.event.kind}' is not a forget "
            "request; emit forget requests with MemoryClient.forget")
    return ForgetRequest(logged.event.event_id, logged.event.tenant, payload.scope,
                         logged.position, payload.reason)


@dataclass(frozen=True)
class Tombstones:
    """The concrete targets of one request, resolved along lineage.

    ``event_ids``: every event whose record, memory row (embedding, full-text entry) or fact
    entry goes. ``fact_mutations``: the fact entries deleted and the versions recomputed as if
    those events were never seen. ``texts`` are the forgotten texts, held in memory only for the
    audit's residual search; they are never persisted.
    """

    request: ForgetRequest
    event_ids: frozenset[str]
    fact_keys: frozenset[FactKey] = frozenset()
    fact_mutations: tuple[Mutation, ...] = ()
    texts: tuple[str, ...] = field(default=(), repr=False)
    sessions: frozenset[str] = frozenset()

    def merged(self, other: Tombstones) -> Tombstones:
        """Targets of two resolutions of the same request (e.g. stores and log)."""
        return Tombstones(self.request, self.event_ids | other.event_ids,
                          self.fact_keys | other.fact_keys,
                          self.fact_mutations + other.fact_mutations,
                          tuple(dict.fromkeys(self.texts + other.texts)),
                          self.sessions | other.sessions)
