"""The producer SDK against the real broker: round trip, order, idempotence, invalid input."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import defaultdict

import pytest

from memstack.aio import AsyncMemoryClient
from memstack.client import MemoryClient
from memstack.foundation.settings import Settings
from memstack.pipelines.log_reader import end_offsets, read_bounded
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import EventKind, parse_event
from tests.logged import open_logged


def _read_all(settings: Settings, topic: str) -> list[bytes]:
    return [r.value for r in read_bounded(settings.bootstrap, topic) if r.value is not None]


def test_round_trip_is_byte_identical_and_ordered_per_session(topics: Settings) -> None:
    sent = []
    with MemoryClient("acme", "helper", settings=topics) as client:
        for i in range(60):
            sent.append(client.message(f"s{i % 4}", "user", f"turn {i} ✓"))
    back = list(read_bounded(topics.bootstrap, topics.events_topic))
    assert all(b'"sealed"' in (r.value or b"") and b"turn" not in (r.value or b"")
               for r in back)  # sealed by default: no text in the clear
    assert sorted(open_logged(topics, r.value).to_json() for r in back) == sorted(
        e.to_json() for e in sent)
    by_session: dict[str, list[str]] = defaultdict(list)
    partitions: dict[str, set[int]] = defaultdict(set)
    for rec in sorted(back, key=lambda r: (r.position.partition, r.position.offset)):
        event = open_logged(topics, rec.value)
        by_session[event.session].append(event.event_id)
        partitions[event.session].add(rec.position.partition)
        assert rec.key == f"acme/{event.session}".encode()
        assert rec.timestamp_type == 1  # LogAppendTime: transaction time comes from the log
    for session, ids in by_session.items():
        assert ids == [e.event_id for e in sent if e.session == session]
        assert len(partitions[session]) == 1


def test_emit_returns_where_the_log_put_it(topics: Settings) -> None:
    with MemoryClient("acme", "helper", settings=topics) as client:
        written = client.emit(client.events.note("s1", "hello")).get()
    assert written.topic == topics.events_topic
    assert written.offset == 0
    rec = next(iter(read_bounded(topics.bootstrap, topics.events_topic)))
    assert rec.position.log_time == written.log_time


def test_invalid_event_raises_and_sends_nothing(topics: Settings) -> None:
    before = end_offsets(topics.bootstrap, topics.events_topic)
    with MemoryClient("acme", "helper", settings=topics) as client:
        with pytest.raises(InvalidEventError) as info:
            client.message("s1", "robot", "beep")
        assert info.value.field == "payload.role"
        with pytest.raises(InvalidEventError):
            client.emit({"kind": "message", "tenant": "acme"})
        with pytest.raises(InvalidEventError):  # one bad event in a batch: none is sent
            client.emit_many([client.events.note("s1", "ok"), {"kind": "note"}])
        client.flush()
    assert end_offsets(topics.bootstrap, topics.events_topic) == before


def _valid_json() -> bytes:
    from memstack.foundation.builders import Defaults, EventBuilder

    return EventBuilder(Defaults("acme", "helper")).note("s1", "ok").to_json()


def test_forget_requests_go_to_the_ledger(topics: Settings) -> None:
    with MemoryClient("acme", "helper", settings=topics) as client:
        event = client.forget({"type": "session", "session": "s1"}, reason="asked")
    ledger = _read_all(topics, topics.forget_topic)
    assert ledger == [event.to_json()]
    assert event.kind is EventKind.FORGET_REQUESTED


def test_a_forget_covers_what_the_client_sent_before_it(topics: Settings) -> None:
    """Events and the request travel on two topics: the client flushes its earlier sends
    before the request, so they are in the log (at or before its log time) when it is sent.
    A long linger holds the message back; without the flush it would still be pending."""
    with MemoryClient("acme", "helper", settings=topics, linger_ms=60_000) as client:
        pending = client.emit(client.events.message("s1", "user", "my pin is 4471"))
        client.forget({"type": "session", "session": "s1"}, reason="asked")
        written = pending.get(timeout=0.001)  # acknowledged before the request was sent
    [request] = read_bounded(topics.bootstrap, topics.forget_topic)
    assert written.log_time <= request.position.log_time


def test_async_client_round_trip(topics: Settings) -> None:
    async def go() -> None:
        async with AsyncMemoryClient("acme", "bot", settings=topics) as client:
            first = await client.message("s1", "user", "hello")
            second = await client.fact("s1", "user:ana", "lives_in", "Porto")
            assert second.offset > first.offset
            batch = await client.emit_many([client.events.note("s1", f"n{i}")
                                            for i in range(20)])
            assert [w.offset for w in batch] == list(range(second.offset + 1,
                                                           second.offset + 21))

    asyncio.run(go())
    values = _read_all(topics, topics.events_topic)
    kinds = [open_logged(topics, v).kind for v in values]
    assert kinds == [EventKind.MESSAGE, EventKind.FACT_ASSERTED] + [EventKind.NOTE] * 20


def test_emit_cli_sends_valid_jsonl_and_refuses_invalid(topics: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    good = _valid_json().decode()
    env = {"MEMSTACK_BOOTSTRAP": topics.bootstrap, "MEMSTACK_TOPIC_PREFIX": topics.topic_prefix,
           "MEMSTACK_HOME": str(topics.home)}
    bad_file = tmp_path / "bad.jsonl"
    bad_file.write_text(good + "\n" + json.dumps({"kind": "note"}) + "\n")
    done = _cli(["emit", str(bad_file)], env)
    assert done.returncode == 2
    assert "line 2" in done.stderr
    assert _read_all(topics, topics.events_topic) == []
    done = _cli(["emit", "-"], env, stdin=good + "\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"sent": 1, "invalid": 0}
    assert [open_logged(topics, v).to_json()
            for v in _read_all(topics, topics.events_topic)] == [good.encode()]


def _cli(args: list[str], env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "memstack.cli", *args], input=stdin,
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=120,
                          check=False)


def test_async_client_seals_as_the_sync_client_does(topics: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from memstack.foundation.keystore import FileKeyStore
    from memstack.foundation.sealing import Shredded, open_record
    from memstack.operators.forget import request_of
    from memstack.operators.log import LoggedEvent
    from memstack.pipelines.forgetting.keys import destroy_for
    from memstack.schemas.sealed import SealedEvent, parse_record

    keys = FileKeyStore(tmp_path / "keys")

    async def go() -> list[object]:
        async with AsyncMemoryClient("acme", "bot", settings=topics, keys=keys) as client:
            said = await client.message("s1", "user", "my PIN is 4711")
            await client.note("s2", "kept")
            await client.forget({"type": "session", "session": "s1"}, reason="asked")
            return [said]

    asyncio.run(go())
    with MemoryClient("acme", "bot", settings=topics, keys=keys) as client:
        client.note("s1", "after the forget")
    values = _read_all(topics, topics.events_topic)
    # the texts as they would appear in plaintext JSON: a bare "4711" can occur in a sealed
    # record's hex ids by chance (CI saw it once), a quoted string cannot occur in base64
    assert len(values) == 3 and not any(b'"my PIN is 4711"' in v or b'"kept"' in v
                                        for v in values)
    sealed = {json.loads(v)["event_id"]: parse_record(v) for v in values}
    s1_keys = {e.sealed.key_id for e in sealed.values()
               if isinstance(e, SealedEvent) and e.session == "s1"}
    assert len(s1_keys) == 2  # s1 after the forget: a fresh key (the old one retired first)
    # Emitting the forget only retired the key; applying the logged request destroys it.
    assert not any(isinstance(open_record(v, keys), Shredded) for v in values)
    record = next(iter(read_bounded(topics.bootstrap, topics.forget_topic)))
    request = request_of(LoggedEvent(parse_event(record.value or b""), record.position))
    assert len(destroy_for(keys, request)) == 1
    opened = [open_record(v, keys) for v in values]  # partitions interleave: compare as sets
    shredded = [o for o in opened if isinstance(o, Shredded)]
    assert [o.envelope.session for o in shredded] == ["s1"]  # its key died with the forget
    assert sorted(o.payload.text for o in opened if not isinstance(o, Shredded)) \
        == ["after the forget", "kept"]
    assert [parse_event(v).kind for v in _read_all(topics, topics.forget_topic)] == [
        EventKind.FORGET_REQUESTED]
