"""The write path's pure logic: all-or-nothing validation, and one produce per event id."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from memstack.pipelines.service.writes import (
    EventWriter,
    WriteLimits,
    WriteRejectedError,
    parse_events,
)
from memstack.schemas.events import Event
from tests.service.conftest import event


def body(*events: dict[str, Any]) -> bytes:
    return json.dumps({"events": list(events)}).encode()


@pytest.mark.parametrize(("raw", "status", "names"), [
    (body(event("acme", "s", "ok"), event("beta", "s", "x")), 403, "['beta']"),
    (body(event("acme", "s", "ok"), {**event("acme", "s", "x"), "kind": "dance"}), 422,
     "events[1].kind"),
    (body(event("acme", "s", "ok"), {**event("acme", "s", "x"), "event_id": "1"}), 422,
     "events[1].event_id"),
    (body(), 422, "at least one event"),
    (b"{not json", 422, "not JSON"),
    (b'{"events": [' + b'{"a": [' * 5000 + b"1" + b"]}" * 5000 + b"]}", 422,
     "nested too deeply"),  # was a 500 (RecursionError); found by eval faults' fuzz run
    (body(*[event("acme", "s", "x")] * 3), 413, "limit is 2"),
    (body(event("acme", "s", "x" * 1000)), 413, "limit is 900"),
])
def test_refusals_name_the_problem(raw: bytes, status: int, names: str) -> None:
    limits = WriteLimits(max_events=2, max_bytes=900) if status == 413 else WriteLimits()
    with pytest.raises(WriteRejectedError) as caught:
        parse_events(raw, "acme", limits)
    assert caught.value.status == status and names in caught.value.detail


@dataclass
class Sent:
    partition: int
    offset: int
    event_id: str
    log_time: datetime

    def get(self, timeout: float) -> Sent:
        return self


class CountingProducer:
    """Counts produce calls (a fake at the broker boundary, for the writer's logic only)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.lock = threading.Lock()

    def emit(self, e: Event | dict[str, Any]) -> Sent:
        assert isinstance(e, Event)
        with self.lock:
            self.sent.append(e.event_id)
            return Sent(0, len(self.sent) - 1, e.event_id, datetime.now(UTC))


def test_retries_and_concurrent_duplicates_produce_once() -> None:
    producer = CountingProducer()
    writer = EventWriter(producer, "t.events")
    events = parse_events(body(*[event("acme", "s", f"e{i}") for i in range(5)]), "acme",
                          WriteLimits())
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: writer.write(events), range(8)))
    assert sorted(producer.sent) == sorted(e.event_id for e in events)
    assert all(a == answers[0] for a in answers)


def test_ids_from_before_a_restart_are_looked_up_in_the_stores() -> None:
    producer = CountingProducer()
    events = parse_events(body(event("acme", "s", "old")), "acme", WriteLimits())
    stored = {events[0].event_id: Sent(2, 41, events[0].event_id, datetime.now(UTC))}

    def lookup(event_id: str) -> Any:
        s = stored.get(event_id)
        from memstack.pipelines.service.writes import WrittenEvent

        return None if s is None else WrittenEvent(s.event_id, s.partition, s.offset,
                                                   s.log_time)

    written = EventWriter(producer, "t.events", lookup=lookup).write(events)
    assert producer.sent == [] and (written[0].partition, written[0].offset) == (2, 41)
