"""The live pipeline against the real broker: emit -> Faust worker -> DuckDB and LanceDB rows.

One worker run (``memstack run --until-caught-up`` in a child process, the real StoreProjector
and MiniLM) serves all assertions, because a worker start costs seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaProducer

from memstack.client import MemoryClient
from memstack.foundation.settings import Settings
from memstack.jobs.run import spawn_worker
from memstack.operators.log import LogPosition
from memstack.operators.session_state.codec import restore_sums
from memstack.pipelines import dlq
from memstack.pipelines.consolidation.feed import FeedRecord
from memstack.pipelines.consolidation.producer import feed_topic
from memstack.pipelines.embedding import shared_encoder
from memstack.pipelines.faust_app import group_id
from memstack.pipelines.log_reader import end_offsets, read_bounded
from memstack.pipelines.session_state.table import changelog_topic, latest_snapshots
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event, EventKind
from memstack.view import MemoryView
from memstack.view.state import SessionStateReader
from tests.logged import open_logged

MALFORMED = b'{"kind": "message", "payload": \xff truncated'
SESSION = "s-dlq"


def emit_scenario(settings: Settings) -> tuple[list[Event], tuple[int, int]]:
    """Valid events of one session around a malformed record on the same partition."""
    sent: list[Event] = []
    with MemoryClient("acme", "helper", settings=settings) as client:
        for i in range(6):
            sent.append(client.message(SESSION, "user", f"I planted {i} tomato seedlings"))
        client.flush()
        raw = KafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
        meta = raw.send(settings.events_topic, key=sent[0].key, value=MALFORMED).get(30)
        raw.close()
        sent.append(client.fact(SESSION, "user:ana", "lives_in", "Lisbon"))
        for i in range(6, 10):
            sent.append(client.message(SESSION, "assistant", f"reminder {i}: water the basil"))
    return sent, (meta.partition, meta.offset)


def positions(settings: Settings) -> dict[str, LogPosition]:
    """event_id -> where the log holds it (partition, offset, append time)."""
    found: dict[str, LogPosition] = {}
    for record in read_bounded(settings.bootstrap, settings.events_topic):
        if record.value != MALFORMED:
            found[open_logged(settings, record.value).event_id] = record.position
    return found


@pytest.mark.timeout(240)
def test_emitted_events_land_in_both_stores_and_malformed_one_in_dlq(
        topics: Settings, tmp_path: Path) -> None:
    sent, bad = emit_scenario(topics)
    stores_dir = tmp_path / "stores"
    worker = spawn_worker(topics, stores_dir, "--until-caught-up", "--within", "0.1",
                          log_path=tmp_path / "worker.log")
    code = worker.wait(timeout=200)
    assert code == 0, (tmp_path / "worker.log").read_text()[-3000:]

    logged = positions(topics)
    assert set(logged) == {e.event_id for e in sent}
    bad_partition, bad_offset = bad
    neighbours = [p for p in logged.values() if p.partition == bad_partition]
    assert min(p.offset for p in neighbours) < bad_offset < max(p.offset for p in neighbours)
    with Stores.open(stores_dir, read_only=True) as stores:
        ends = end_offsets(topics.bootstrap, topics.events_topic)
        assert stores.events.applied_offsets(topics.events_topic) == {
            p: end for p, end in ends.items() if end}
        texts = {e.event_id: e for e in sent if e.kind is EventKind.MESSAGE}
        for event_id, event in texts.items():
            row = stores.events.record(event_id)
            assert row is not None, f"record {event_id} missing"
            pos = logged[event_id]
            assert (row.partition, row.offset, row.tt) == (pos.partition, pos.offset,
                                                            pos.log_time)
            assert row.vt_from == event.valid_start
        memories = {m.event_id: m for m in stores.vectors.get(list(texts))}
        assert set(memories) == set(texts)
        for event_id, memory in memories.items():
            assert memory.tt_from == logged[event_id].log_time
            assert memory.text == texts[event_id].text()
        # The session state reads back through MemoryView: nearest turns to a query.
        reader = SessionStateReader.from_changelog(stores, shared_encoder(), topics.bootstrap,
                                                   changelog_topic(group_id(topics)))
        view = MemoryView("acme", stores, state=reader)
        hits = view.session_state(SESSION).read("how many tomato seedlings did I plant?", 3)
        assert hits and "tomato" in hits[0].text, hits
        facts = stores.events.facts_as_of("acme", subject="user:ana", relation="lives_in")
        fact_pos = logged[sent[6].event_id]
        assert [(f.object, f.tt_from, f.tt_from_offset) for f in facts] == [
            ("Lisbon", fact_pos.log_time, fact_pos.offset)]

    letters = [r for r in read_bounded(topics.bootstrap, topics.dlq_topic)]
    assert len(letters) == 1
    letter = dlq.decode(letters[0].value or b"")
    assert (letter.partition, letter.offset) == bad
    assert letters[0].key == f"{bad_partition}:{bad_offset}".encode()
    assert letter.value == MALFORMED and letter.reason

    # The session's recurrent state lives in the worker's Faust table; its changelog holds it.
    snapshots = latest_snapshots(topics.bootstrap, changelog_topic(group_id(topics)))
    state = restore_sums(snapshots[f"acme/{SESSION}"])
    assert sorted(state.counts) == [1, 10]  # one fact item, ten turn items
    assert state.marks[f"p{bad_partition}"] == max(p.offset for p in neighbours) + 1

    # The fact also went to the consolidation feed, distilled from the stores.
    feed = [FeedRecord.from_bytes(r.value or b"") for r in read_bounded(
        topics.bootstrap, feed_topic(topics))]
    writes = [r for r in feed if r.op == "write"]
    assert len(writes) == 1 and writes[0].source_event_id == sent[6].event_id
