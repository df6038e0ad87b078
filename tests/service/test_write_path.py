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
    MAX_DEPTH,
    MAX_EVENT_BYTES,
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
        from memstack.foundation.log_coordinates import Written

        return None if s is None else Written(s.event_id, s.partition, s.offset, s.log_time)

    written = EventWriter(producer, "t.events", lookup=lookup).write(events)
    assert producer.sent == [] and (written[0].partition, written[0].offset) == (2, 41)


def deep_body(depth: int) -> bytes:
    """A valid message, then a tool call whose arguments nest ``depth`` objects deep (as
    text: json.dumps itself recurses too deep for 980)."""
    call = {**event("acme", "s", "x"), "kind": "tool_call",
            "payload": {"tool": "t", "call_id": "c", "arguments": "ARGS"}}
    nested = '{"a": ' * depth + "{}" + "}" * depth
    text = json.dumps({"events": [event("acme", "s", "ok"), call]})
    return text.replace('"ARGS"', nested).encode()


@pytest.mark.parametrize("depth", [62, 300, 980])
def test_depth_is_bounded_before_anything_is_produced(depth: int) -> None:
    """A tool call nested 300 deep validated but failed to serialize in the producer, after
    the events before it were sent (a 500 with a partial write)."""
    raw = deep_body(depth)
    if depth + 3 <= MAX_DEPTH:  # event, payload, arguments, then the nesting
        assert len(parse_events(raw, "acme", WriteLimits())) == 2
        return
    with pytest.raises(WriteRejectedError) as caught:
        parse_events(raw, "acme", WriteLimits())
    assert caught.value.status == 422
    field = caught.value.field or ""  # the parser's own stack may end first (then: body)
    assert field.startswith("events[1].payload.arguments.a.a") or field == "body", field


def test_one_event_is_bounded_in_bytes() -> None:
    raw = body(event("acme", "s", "ok"), event("acme", "s", "x" * (MAX_EVENT_BYTES + 1)))
    with pytest.raises(WriteRejectedError) as caught:
        parse_events(raw, "acme", WriteLimits())
    assert caught.value.status == 413 and caught.value.field == "events[1]"


def test_an_id_reused_with_other_content_is_409_and_sends_nothing() -> None:
    producer = CountingProducer()
    writer = EventWriter(producer, "t.events")
    first = event("acme", "s", "the first content")
    writer.write(parse_events(body(first), "acme", WriteLimits()))
    retried = writer.write(parse_events(body(first), "acme", WriteLimits()))  # same: idempotent
    assert retried[0].offset == 0 and len(producer.sent) == 1
    changed = {**first, "payload": {"role": "user", "text": "other content"}}
    fresh = event("acme", "s", "new")
    with pytest.raises(WriteRejectedError) as caught:
        writer.write(parse_events(body(fresh, changed), "acme", WriteLimits()))
    assert caught.value.status == 409 and caught.value.field == "events[1].event_id"
    assert producer.sent == [first["event_id"]]  # the fresh event before it was not sent
    with pytest.raises(WriteRejectedError) as within:  # two contents under one id, one request
        writer.write(parse_events(body(fresh, {**fresh, "session": "s2"}), "acme",
                                  WriteLimits()))
    assert within.value.status == 409 and producer.sent == [first["event_id"]]


class FailingProducer(CountingProducer):
    """Sends until ``fail_at`` produce calls, then raises (the broker refusing)."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at

    def emit(self, e: Event | dict[str, Any]) -> Sent:
        if len(self.sent) >= self.fail_at:
            raise RuntimeError("broker refused")
        return super().emit(e)


def test_a_failure_while_producing_lists_what_was_and_was_not_written() -> None:
    producer = FailingProducer(fail_at=1)
    writer = EventWriter(producer, "t.events")
    events = parse_events(body(*[event("acme", "s", f"e{i}") for i in range(3)]), "acme",
                          WriteLimits())
    with pytest.raises(WriteRejectedError) as caught:
        writer.write(events)
    assert caught.value.status == 503
    written = caught.value.extensions["written"]
    not_written = caught.value.extensions["not_written"]
    assert [w["event_id"] for w in written] == [events[0].event_id]
    assert [n["event_id"] for n in not_written] == [e.event_id for e in events[1:]]
    assert producer.sent == [events[0].event_id]
    producer.fail_at = 10  # the broker is back: the retry sends only what was missing
    again = writer.write(events)
    assert [w.offset for w in again] == [0, 1, 2] and len(producer.sent) == 3


def test_a_failing_lookup_leaves_no_claim_unsettled() -> None:
    """A store look-up that raises is reported like a failed send, and a retry works (before,
    the exception escaped with the later events' claims left waiting for ever)."""
    failing = True

    def lookup(event_id: str) -> Any:
        if failing:
            raise RuntimeError("stores closed for a forget")
        return None

    producer = CountingProducer()
    writer = EventWriter(producer, "t.events", lookup=lookup)
    events = parse_events(body(*[event("acme", "s", f"e{i}") for i in range(2)]), "acme",
                          WriteLimits())
    with pytest.raises(WriteRejectedError) as caught:
        writer.write(events, timeout_s=2.0)
    assert caught.value.status == 503 and len(caught.value.extensions["not_written"]) == 2
    failing = False
    assert [w.offset for w in writer.write(events, timeout_s=2.0)] == [0, 1]
