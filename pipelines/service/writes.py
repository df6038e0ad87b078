"""The HTTP write path: validate a whole request, then produce it and wait for the broker.

A request is validated completely before anything is sent (all-or-nothing): the body's size and
event count, every event against the schema (the error names ``events[i].field``), and every
event's tenant against the path's. Events are then produced idempotently with ``acks=all`` on
the service's one :class:`MemoryClient` (sealed when ``MEMSTACK_SEAL=1``) and the answer lists
where the log put each one and the position token after them.

A retried request does not produce an event id again: the writer remembers the events it wrote
(and those in flight) and answers the first write's offsets, and it looks an id up in the stores'
records when it does not remember it (after a restart). So no store sees the event twice.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from memstack.foundation.errors import MemstackError
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event, EventKind, decode_json, format_time, validate_event

log = logging.getLogger(__name__)

REMEMBERED = 200_000
"""Event ids the writer remembers for retries (about 30 MB)."""


class WriteRejectedError(MemstackError):
    """A write request was refused; ``status`` is the HTTP status that says why, ``field`` the
    offending body field (``events[1].occurred_at``) when there is one, and ``extensions``
    further members of the problem document the service answers."""

    def __init__(self, status: int, detail: str, *, field: str | None = None,
                 **extensions: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field
        self.extensions = extensions


@dataclass(frozen=True)
class WriteLimits:
    max_events: int = 1000
    max_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True)
class WrittenEvent:
    event_id: str
    partition: int
    offset: int
    log_time: datetime

    def to_json(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "partition": self.partition, "offset": self.offset,
                "log_time": format_time(self.log_time)}


class Producer(Protocol):
    """What the writer needs of :class:`memstack.client.MemoryClient`."""

    def emit(self, event: Event | dict[str, Any]) -> Any: ...


Lookup = Callable[[str], WrittenEvent | None]
"""Where the stores hold an event id (None: not applied, or not a record)."""


def parse_events(body: bytes, tenant: str, limits: WriteLimits) -> list[Event]:
    """The request's events, validated; raises :class:`WriteRejectedError` (413/422/403)."""
    if len(body) > limits.max_bytes:
        raise WriteRejectedError(413, f"the body has {len(body)} bytes; the limit is "
                                      f"{limits.max_bytes} (split the events into requests)")
    try:
        data = decode_json(body)  # also refuses nesting too deep to parse (was a 500)
    except InvalidEventError as exc:
        raise WriteRejectedError(422, f"the body is not JSON: {exc.rule}") from exc
    raw = data.get("events") if isinstance(data, dict) else None
    if not isinstance(raw, list) or not raw:
        raise WriteRejectedError(422, "body: expected {\"events\": [event, ...]} with at "
                                      "least one event (see schemas/event.v1.json)")
    if len(raw) > limits.max_events:
        raise WriteRejectedError(413, f"{len(raw)} events; the limit is {limits.max_events} "
                                      "per request")
    events = [_one(i, item) for i, item in enumerate(raw)]
    foreign = sorted({e.tenant for e in events if e.tenant != tenant})
    if foreign:
        raise WriteRejectedError(403, f"events name tenant(s) {foreign} but the path is tenant "
                                      f"{tenant!r}; nothing was written")
    return events


def _one(index: int, item: Any) -> Event:
    if not isinstance(item, dict):
        raise WriteRejectedError(422, f"events[{index}]: expected an event object")
    try:
        event = validate_event(item)
    except InvalidEventError as exc:
        raise WriteRejectedError(422, f"events[{index}].{exc.field}: {exc.rule}; nothing was "
                                      "written") from exc
    if event.kind is EventKind.FORGET_REQUESTED:
        raise WriteRejectedError(422, f"events[{index}].kind: forget requests go to POST "
                                      ".../forget (they need the forget role)")
    return event


class EventWriter:
    """Produces validated events once per event id and returns where they were written."""

    def __init__(self, producer: Producer, topic: str, lookup: Lookup | None = None,
                 remembered: int = REMEMBERED) -> None:
        self._producer = producer
        self._topic = topic
        self._lookup = lookup
        self._remembered = remembered
        self._lock = threading.Lock()
        self._known: OrderedDict[str, Future[WrittenEvent]] = OrderedDict()

    def write(self, events: Sequence[Event], timeout_s: float = 30.0) -> list[WrittenEvent]:
        """Produce the events not written before and wait for every acknowledgement (blocking).
        Raises the producer's error when the broker did not acknowledge; a retry is safe."""
        claims = [self._claim(event) for event in events]
        for future, pending in claims:
            if pending is not None:
                _settle(pending, future, timeout_s)
        return [future.result(timeout=timeout_s) for future, _ in claims]

    def _claim(self, event: Event) -> tuple[Future[WrittenEvent], Any]:
        """The event's future, and the pending send when this call produced it."""
        with self._lock:
            known = self._known.get(event.event_id)
            if known is not None and not (known.done() and known.exception() is not None):
                self._known.move_to_end(event.event_id)
                return known, None
            future: Future[WrittenEvent] = Future()
            self._known[event.event_id] = future
            while len(self._known) > self._remembered:
                self._known.popitem(last=False)
        stored = self._lookup(event.event_id) if self._lookup is not None else None
        if stored is not None:
            future.set_result(stored)
            return future, None
        try:
            return future, self._producer.emit(event)
        except BaseException as exc:
            future.set_exception(exc)
            raise


def _settle(pending: Any, future: Future[WrittenEvent], timeout_s: float) -> None:
    try:
        written = pending.get(timeout=timeout_s)
        future.set_result(WrittenEvent(written.event_id, written.partition, written.offset,
                                       written.log_time))
    except BaseException as exc:
        future.set_exception(exc)
