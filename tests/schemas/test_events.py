"""The event envelope: validation rules, canonical bytes, ids."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event, EventKind, parse_event
from memstack.schemas.ids import is_uuid7, uuid7, uuid7_millis

B = EventBuilder(Defaults(tenant="t1", agent="a1"))
T = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def test_round_trip_is_byte_identical() -> None:
    event = B.message("s1", "user", "héllo ✓", occurred_at=T)
    raw = event.to_json()
    again = parse_event(raw)
    assert again == event
    assert again.to_json() == raw


def test_times_are_normalised_to_utc_on_the_wire() -> None:
    lisbon_summer = timezone(timedelta(hours=1))
    event = B.note("s1", "x", occurred_at=T.astimezone(lisbon_summer))
    assert json.loads(event.to_json())["occurred_at"] == "2026-01-02T03:04:05.678901Z"


def test_every_kind_builds_and_parses() -> None:
    events = [
        B.message("s", "assistant", "hi"),
        B.tool_call("s", "search", "c1", {"q": "flats"}),
        B.tool_result("s", "search", "c1", "3 results"),
        B.observation("s", "it rains"),
        B.note("s", "remember the cat"),
        B.fact("s", "user:ana", "lives_in", "Porto", valid_from=T),
        B.retract("s", "user:ana", "lives_in"),
        B.forget({"type": "session", "session": "s"}, reason="user asked"),
    ]
    assert {e.kind for e in events} == set(EventKind)
    for e in events:
        assert parse_event(e.to_json()) == e


@pytest.mark.parametrize(
    ("mutate", "field", "rule"),
    [
        (lambda d: d.pop("tenant"), "tenant", "Field required"),
        (lambda d: d.update(kind="dream"), "kind", "Input should be"),
        (lambda d: d.update(occurred_at="2026-01-01T00:00:00"), "occurred_at", "timezone-aware"),
        (lambda d: d.update(event_id="not-a-uuid"), "event_id", "UUIDv7"),
        (lambda d: d.update(event_id="6ba7b810-9dad-11d1-80b4-00c04fd430c8"), "event_id", "UUIDv7"),
        (lambda d: d["payload"].update(role="robot"), "payload.role", "Input should be"),
        (lambda d: d["payload"].update(extra=1), "payload.extra", "Extra inputs"),
        (lambda d: d.update(schema_version=99), "schema_version", "unsupported"),
        (lambda d: d.update(occurred_at="0001-01-01T00:00:00+04:03"), "occurred_at",
         "out of range once taken to UTC"),
        (lambda d: d.update(valid_to="9999-12-31T23:59:59-01:00"), "valid_to",
         "out of range once taken to UTC"),
        (lambda d: d.update(valid_from="2026-02-01T00:00:00Z", valid_to="2026-01-01T00:00:00Z"),
         "$", "valid_from must be before valid_to"),
    ],
)
def test_invalid_event_names_field_and_rule(mutate, field, rule) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(B.message("s1", "user", "hi").to_json())
    mutate(data)
    with pytest.raises(InvalidEventError) as info:
        parse_event(json.dumps(data).encode())
    assert info.value.field == field
    assert rule in info.value.rule


def test_fact_requires_subject() -> None:
    data = json.loads(B.fact("s1", "user:ana", "lives_in", "Porto").to_json())
    del data["subject"]
    with pytest.raises(InvalidEventError, match="requires 'subject'"):
        parse_event(json.dumps(data).encode())


def test_forget_scope_requires_its_fields() -> None:
    with pytest.raises(InvalidEventError) as info:
        B.forget({"type": "fact", "subject": "user:ana"})
    assert info.value.field == "payload.scope"
    assert "requires 'relation'" in info.value.rule


def test_garbage_bytes_are_rejected_with_reason() -> None:
    for raw in (b"\xff\xfe", b"{not json", b"[1,2]"):
        with pytest.raises(InvalidEventError) as info:
            parse_event(raw)
        assert info.value.field == "$"
        assert info.value.raw == raw


def test_key_keeps_a_session_together() -> None:
    assert B.message("s9", "user", "x").key == b"t1/s9"


def test_uuid7_is_time_ordered_and_valid() -> None:
    ids = [uuid7() for _ in range(2000)]
    assert all(u.version == 7 for u in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(is_uuid7(str(u)) for u in ids[:10])
    assert abs(uuid7_millis(str(ids[0])) - datetime.now(UTC).timestamp() * 1000) < 5000


def test_event_is_immutable() -> None:
    event = B.note("s1", "x")
    with pytest.raises(Exception, match="frozen"):
        event.tenant = "other"  # type: ignore[misc]
    assert isinstance(event, Event)


def test_json_nested_too_deeply_is_an_invalid_event_not_a_crash() -> None:
    """Found by the fault suite's fuzz run: json.loads raised RecursionError, which is not an
    InvalidEventError, so the live worker stopped on such a record instead of dead-lettering
    it (and stopped again on every restart)."""
    deep = b'{"a": [' * 5000 + b"1" + b"]}" * 5000
    with pytest.raises(InvalidEventError, match="nested too deeply"):
        parse_event(deep)


@pytest.mark.parametrize("kind", [{"o": 1}, ["message"], 42, None])
def test_a_kind_of_the_wrong_type_is_an_invalid_event_not_a_crash(kind: object) -> None:
    """Found by the fuzz run: a JSON object as ``kind`` raised TypeError (unhashable)."""
    raw = {"event_id": str(uuid7()), "tenant": "t", "agent": "a", "session": "s",
           "kind": kind, "occurred_at": "2026-11-30T12:00:00Z",
           "provenance": {"source": "x"}, "payload": {"role": "user", "text": "x"}}
    with pytest.raises(InvalidEventError, match="kind"):
        parse_event(json.dumps(raw).encode())
