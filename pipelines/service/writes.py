"""The HTTP write path: validate a whole request, then produce it and wait for the broker.

A request is validated completely before anything is sent (all-or-nothing): the body's size and
event count, every event against the schema (the error names ``events[i].field``), and every
event's tenant against the path's. Events are then produced idempotently with ``acks=all`` on
the service's one :class:`MemoryClient` (sealed unless ``MEMSTACK_SEAL=0``) and the answer lists
where the log put each one and the position token after them.

A retried request does not produce an event id again: the writer remembers the events it wrote
(and those in flight) and answers the first write's offsets, and it looks an id up in the stores'
records when it does not remember it (after a restart). So no store sees the event twice.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from memstack.foundation.errors import MemstackError
from memstack.foundation.log_coordinates import Written
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event, EventKind, decode_json, validate_event

log = logging.getLogger(__name__)

REMEMBERED = 200_000
"""Event ids the writer remembers for retries (about 40 MB with their fingerprints)."""

MAX_DEPTH = 64
"""The deepest nesting of JSON arrays and objects one event may have (its free-form objects,
e.g. a tool call's ``arguments``, included); the event itself counts as level 1."""

MAX_EVENT_BYTES = 512 * 1024
"""The most bytes one event may take on the wire before sealing (sealing grows the payload by
a third; the broker's default record limit is 1 MiB)."""


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


class Producer(Protocol):
    """What the writer needs of :class:`memstack.client.MemoryClient`."""

    def emit(self, event: Event | dict[str, Any]) -> Any: ...


Lookup = Callable[[str], Written | None]
"""Where the stores hold an event id (None: not applied, or not a record)."""


def parse_events(body: bytes, tenant: str, limits: WriteLimits) -> list[Event]:
    """The request's events, validated; raises :class:`WriteRejectedError` (413/422/403)."""
    if len(body) > limits.max_bytes:
        raise WriteRejectedError(413, f"the body has {len(body)} bytes; the limit is "
                                      f"{limits.max_bytes} (split the events into requests)",
                                 field="body")
    try:
        data = decode_json(body)  # also refuses nesting too deep to parse (was a 500)
    except InvalidEventError as exc:
        raise WriteRejectedError(422, f"the body is not JSON: {exc.rule}", field="body") from exc
    raw = data.get("events") if isinstance(data, dict) else None
    if not isinstance(raw, list) or not raw:
        raise WriteRejectedError(422, "body: expected {\"events\": [event, ...]} with at "
                                      "least one event (see schemas/event.v1.json)",
                                 field="events")
    if len(raw) > limits.max_events:
        raise WriteRejectedError(413, f"{len(raw)} events; the limit is {limits.max_events} "
                                      "per request", field="events")
    events = [_one(i, item) for i, item in enumerate(raw)]
    foreign = sorted({e.tenant for e in events if e.tenant != tenant})
    if foreign:
        raise WriteRejectedError(403, f"events name tenant(s) {foreign} but the path is tenant "
                                      f"{tenant!r}; nothing was written", field="events")
    return events


def _one(index: int, item: Any) -> Event:
    if not isinstance(item, dict):
        raise WriteRejectedError(422, f"events[{index}]: expected an event object",
                                 field=f"events[{index}]")
    deep = (_deeper_than(item, MAX_DEPTH) or "")[:200] or None
    if deep is not None:
        raise WriteRejectedError(422, f"events[{index}]{deep}: nested deeper than {MAX_DEPTH} "
                                      "levels of arrays and objects; nothing was written",
                                 field=f"events[{index}]{deep}")
    try:
        event = validate_event(item)
    except InvalidEventError as exc:
        raise WriteRejectedError(422, f"events[{index}].{exc.field}: {exc.rule}; nothing was "
                                      "written", field=f"events[{index}].{exc.field}") from exc
    size = len(event.to_json())  # what the producer will serialize, so it cannot fail later
    if size > MAX_EVENT_BYTES:
        raise WriteRejectedError(413, f"events[{index}]: {size} bytes; one event may take "
                                      f"{MAX_EVENT_BYTES}; nothing was written",
                                 field=f"events[{index}]")
    if event.kind is EventKind.FORGET_REQUESTED:
        raise WriteRejectedError(422, f"events[{index}].kind: forget requests go to POST "
                                      ".../forget (they need the forget role)",
                                 field=f"events[{index}].kind")
    return event


def _deeper_than(item: Any, limit: int) -> str | None:
    """The path (``.payload.arguments.a``) of the first value nested deeper than ``limit``
    levels of arrays and objects, or None (iterative: hostile depth cannot recurse)."""
    stack: list[tuple[Any, str, int]] = [(item, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        children = (value.items() if isinstance(value, dict) else
                    enumerate(value) if isinstance(value, list) else ())
        for key, child in children:
            if isinstance(child, (dict, list)):
                where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"
                if depth + 1 > limit:
                    return where
                stack.append((child, where, depth + 1))
    return None


class EventWriter:
    """Produces validated events once per event id and returns where they were written.

    An id it remembers answers the first write's receipt when the event is the same (a retry),
    and is refused with 409 when it is not (the log keeps the first payload, so a second one
    would be silently lost). A request is checked for such conflicts before anything is sent.
    """

    def __init__(self, producer: Producer, topic: str, lookup: Lookup | None = None,
                 remembered: int = REMEMBERED,
                 on_written: Callable[[list[Written]], None] | None = None) -> None:
        self._producer = producer
        self._topic = topic
        self._lookup = lookup
        self._remembered = remembered
        self._on_written = on_written
        """Told every acknowledged write (the service's health check)."""
        self._lock = threading.Lock()
        self._known: OrderedDict[str, tuple[bytes, Future[Written]]] = OrderedDict()

    def write(self, events: Sequence[Event], timeout_s: float = 30.0) -> list[Written]:
        """Produce the events not written before and wait for every acknowledgement (blocking).

        Raises :class:`WriteRejectedError` 409 (nothing sent) when an id was written with
        another payload, and 503 listing the receipts of what was and was not written when the
        broker did not acknowledge every event; retrying the same request is safe.
        """
        claims = self._claim_all(events)
        pending = self._send(events, claims)
        for (future, _), sent in zip(claims, pending, strict=True):
            if sent is not None:
                _settle(sent, future, timeout_s)
        return _receipts(events, [future for future, _ in claims], timeout_s, self._on_written)

    def _claim_all(self, events: Sequence[Event]) -> list[tuple[Future[Written], bool]]:
        """Each event's future and whether this call must produce it; 409 before any claim."""
        prints = [_fingerprint(event) for event in events]
        with self._lock:
            _refuse_conflicts(events, prints, self._known)
            claims: list[tuple[Future[Written], bool]] = []
            for event, print_ in zip(events, prints, strict=True):
                known = self._known.get(event.event_id)
                if known is not None and not _failed(known[1]):
                    self._known.move_to_end(event.event_id)
                    claims.append((known[1], False))
                    continue
                future: Future[Written] = Future()
                self._known[event.event_id] = (print_, future)
                claims.append((future, True))
            while len(self._known) > self._remembered:
                self._known.popitem(last=False)
        return claims

    def _send(self, events: Sequence[Event],
              claims: list[tuple[Future[Written], bool]]) -> list[Any]:
        """Produce the claimed events in order; after a failed send, none of the rest."""
        pending: list[Any] = []
        failure: BaseException | None = None
        for event, (future, mine) in zip(events, claims, strict=True):
            sent = None
            if mine and failure is not None:
                future.set_exception(NotSentError(f"not sent: {failure}"))
            elif mine:
                try:  # every claimed future is settled here, or by _settle: none left waiting
                    stored = self._lookup(event.event_id) if self._lookup is not None else None
                    sent = None if stored is not None else self._producer.emit(event)
                    if stored is not None:
                        future.set_result(stored)
                except Exception as exc:
                    log.warning("producing event %s failed: %s", event.event_id, exc)
                    failure = exc
                    future.set_exception(exc)
            pending.append(sent)
        return pending


class NotSentError(MemstackError):
    """An event of a request was not sent because an earlier one failed to send."""


def _fingerprint(event: Event) -> bytes:
    return hashlib.sha256(event.to_json()).digest()


def _failed(future: Future[Written]) -> bool:
    return future.done() and future.exception() is not None


def _refuse_conflicts(events: Sequence[Event], prints: Sequence[bytes],
                      known: Mapping[str, tuple[bytes, Future[Written]]]) -> None:
    """409 naming the first event whose id was written (or is in this request) with another
    payload."""
    seen: dict[str, bytes] = {}
    for index, (event, print_) in enumerate(zip(events, prints, strict=True)):
        held = known.get(event.event_id)
        first = seen.setdefault(event.event_id, print_)
        if first != print_ or (held is not None and held[0] != print_ and not _failed(held[1])):
            raise WriteRejectedError(
                409, f"events[{index}].event_id: {event.event_id} was already written with "
                     "other content; an event id names one event for ever (make a new id with "
                     "a UUIDv7, or resend the first content to retry); nothing was written",
                field=f"events[{index}].event_id", event_id=event.event_id)


def _receipts(events: Sequence[Event], futures: Sequence[Future[Written]],
              timeout_s: float,
              on_written: Callable[[list[Written]], None] | None = None,
              ) -> list[Written]:
    """Every event's receipt, or 503 listing what was and was not written; ``on_written`` is
    told the acknowledged ones either way."""
    written: list[Written] = []
    missing: list[dict[str, str]] = []
    for event, future in zip(events, futures, strict=True):
        try:
            written.append(future.result(timeout=timeout_s))
        except Exception as exc:
            missing.append({"event_id": event.event_id, "reason": str(exc)[:300]})
    if on_written is not None and written:
        on_written(written)
    if missing:
        raise WriteRejectedError(
            503, f"{len(missing)} of {len(events)} event(s) were not acknowledged by the broker "
                 f"({missing[0]['reason']}); 'written' lists those that were. Retry the same "
                 "request: written ids are answered from the first write, not produced again",
            written=[w.to_json() for w in written], not_written=missing)
    return written


def _settle(pending: Any, future: Future[Written], timeout_s: float) -> None:
    try:
        written = pending.get(timeout=timeout_s)
        future.set_result(Written(written.event_id, written.partition, written.offset,
                                  written.log_time))
    except BaseException as exc:
        future.set_exception(exc)
