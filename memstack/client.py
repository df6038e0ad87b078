"""The producer SDK: ``MemoryClient`` emits immutable memory events to Kafka.

One call per event; events are validated before anything is sent, keyed by tenant/session so a
session stays ordered, and produced idempotently with ``acks=all``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from kafka import KafkaProducer
from kafka.errors import AuthorizationError, KafkaError

from memstack.foundation.builders import Defaults, EventBuilder, LogEncoder, checked_all
from memstack.foundation.errors import (
    BrokerUnavailableError,
    KafkaAuthorizationError,
    MemstackError,
)
from memstack.foundation.kafka_connect import check_connection, client_options, explain
from memstack.foundation.kafka_security import KafkaSecurity
from memstack.foundation.keystore import KeyStore
from memstack.foundation.log_coordinates import Written as Written
from memstack.foundation.settings import Settings
from memstack.foundation.telemetry import maybe, memory_tracer
from memstack.schemas.events import Event, EventKind

log = logging.getLogger(__name__)

PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "all",  # explicit: every in-sync replica has the event before it counts as written
    "enable_idempotence": True,  # a retried send never duplicates
    "max_in_flight_requests_per_connection": 5,  # the most idempotence allows with ordering kept
    "linger_ms": 5,
    "batch_size": 256 * 1024,
    "retries": 2**31 - 1,
}


class EmitError(MemstackError):
    """Kafka did not accept an event; the message says whether it is safe to retry."""


class EmitDeniedError(EmitError, KafkaAuthorizationError):
    """An ACL does not let this client's principal write the event's topic."""


class PendingEmit:
    """A sent event whose acknowledgement may still be in flight."""

    def __init__(self, event_id: str, future: Any,
                 security: KafkaSecurity | None = None) -> None:
        self.event_id = event_id
        self._future = future
        self._security = security

    def get(self, timeout: float = 30.0) -> Written:
        try:
            meta = self._future.get(timeout=timeout)
        except KafkaError as exc:
            raise not_acknowledged(self.event_id, exc, self._security) from exc
        return written_of(self.event_id, meta)


def written_of(event_id: str, meta: Any) -> Written:
    """A ``Written`` from kafka-python's record metadata (log append time in ms)."""
    return Written(event_id, meta.partition, meta.offset,
                   datetime.fromtimestamp(meta.timestamp / 1000, UTC), meta.topic)


def not_acknowledged(event_id: str, exc: BaseException,
                     security: KafkaSecurity | None = None) -> EmitError:
    """The error of an event the log did not take (:class:`EmitDeniedError` for an ACL)."""
    kind = EmitDeniedError if isinstance(exc, AuthorizationError) else EmitError
    return kind(f"event {event_id} was not acknowledged: {explain(exc, security)}")


def open_producer(settings: Settings, overrides: dict[str, Any]) -> KafkaProducer:
    """The idempotent ``acks=all`` producer of both clients, or a clear broker error: with TLS
    or SASL, a refused handshake or login fails here, naming the setting to fix."""
    check_connection(settings.bootstrap, settings.kafka_security)
    try:
        return KafkaProducer(**client_options(settings.bootstrap, settings.kafka_security),
                             **{**PRODUCER_CONFIG, **overrides})
    except KafkaError as exc:
        raise BrokerUnavailableError(
            f"no Kafka broker at {settings.bootstrap}; start one with "
            "`memstack infra up` or set MEMSTACK_BOOTSTRAP"
        ) from exc


class MemoryClient(EventBuilder):
    """Emit memory events to ``<prefix>.events`` (and forget requests to ``<prefix>.forget``).

    Every helper (``message``, ``tool_call``, ``tool_result``, ``observation``, ``note``,
    ``fact``, ``retract``, ``forget``) validates, sends and returns the event it sent.

    >>> with MemoryClient(tenant="acme", agent="helper") as client:   # doctest: +SKIP
    ...     client.message("s1", "user", "I moved to Lisbon")
    ...     client.fact("s1", "user:ana", "lives_in", "Lisbon")
    """

    def __init__(self, tenant: str, agent: str, *, settings: Settings | None = None,
                 source: str = "memstack-sdk", keys: KeyStore | None = None,
                 tracer_provider: Any = None, **producer_overrides: Any) -> None:
        super().__init__(Defaults(tenant=tenant, agent=agent, source=source))
        self.tracer = memory_tracer(tracer_provider)
        """Spans per emitted event when tracing is on (``MEMSTACK_OTEL=1``, docs/otel.md)."""
        self.settings = settings or Settings.from_env()
        self.encoder = LogEncoder(self.settings, keys)
        self.keys = self.encoder.keys
        """When set, payloads are sealed with per-scope data keys (crypto-shredding)."""
        self.events = EventBuilder(self.defaults)
        """Builds events without sending them (``client.emit(client.events.note(...))``)."""
        self._producer = open_producer(self.settings, producer_overrides)

    def emit(self, event: Event | dict[str, Any]) -> PendingEmit:
        """Send one event (validated first; an invalid one raises and sends nothing).

        A forget request covers every event this client sent before it: those are flushed
        (acknowledged, so in the log) before the request is sent. Events and requests travel on
        two topics, and without the flush a retried event could land after the request.
        """
        with maybe(self.tracer, lambda t: t.write_span(None, [event])):
            record = self.encoder.encode(event)
            if record.is_forget:
                self._producer.flush()
            try:
                future = self._producer.send(record.topic, key=record.key, value=record.value)
            except KafkaError as exc:  # e.g. an ACL denial, raised before anything is sent
                raise not_acknowledged(record.event.event_id, exc,
                                       self.settings.kafka_security) from exc
        return PendingEmit(record.event.event_id, future, self.settings.kafka_security)

    def emit_many(self, events: Sequence[Event | dict[str, Any]]) -> list[PendingEmit]:
        """Send a batch; all are validated before the first is sent."""
        return [self.emit(e) for e in checked_all(events)]

    def emit_confirmed(self, events: Sequence[Event | dict[str, Any]]) -> list[Written]:
        """Send a batch and block until the log acknowledged all of it; where each one landed."""
        pending = self.emit_many(events)
        self.flush()
        return [p.get() for p in pending]

    def build(self, kind: EventKind, session: str, payload: dict[str, Any], **env: Any) -> Event:
        """Helpers (``message``, ``fact``, ...) build, validate and emit in one call."""
        event = super().build(kind, session, payload, **env)
        self.emit(event)
        return event

    def flush(self, timeout: float | None = None) -> None:
        """Block until every sent event is acknowledged."""
        self._producer.flush(timeout=timeout)

    def close(self, timeout: float = 30.0) -> None:
        self._producer.flush(timeout=timeout)
        self._producer.close(timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
