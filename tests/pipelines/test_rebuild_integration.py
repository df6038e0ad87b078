"""Emit through the SDK to a real broker, rebuild the stores from the log, check rows and times."""

from __future__ import annotations

from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.rebuild import rebuild
from memstack.pipelines.stores.bundle import Stores, stores_dir
from tests.pipelines.helpers import builder, year


def test_emitted_events_are_rebuilt_with_log_append_times(
    topics: Settings, minilm: MiniLMEncoder
) -> None:
    b = builder("acme")
    events = [
        b.message("s1", "user", "I just moved to Lisbon"),
        b.fact("s1", "ana", "lives_in", "Lisbon", valid_from=year(2024)),
        b.note("s2", "Ana takes the train to work"),
        b.fact("s2", "ana", "lives_in", "Porto", valid_from=year(2025)),
    ]
    with MemoryClient("acme", "helper", settings=topics) as client:
        pending = [client.emit(e) for e in events]
        written = [p.get() for p in pending]

    into = stores_dir(topics, "rebuilt")
    result = rebuild(topics.bootstrap, topics.events_topic, into, batch=2, encoder=minilm,
                     keys=FileKeyStore(topics.keys_dir))
    assert (result.events, result.dead_letters) == (4, 0)
    ends: dict[int, int] = {}
    for w in written:
        ends[w.partition] = max(ends.get(w.partition, 0), w.offset + 1)
    assert result.next_offsets == ends

    with Stores.open(into, read_only=True) as stores:
        assert stores.events.counts()["records"] == 2
        assert stores.vectors.count() == 2
        for event, w in ((events[0], written[0]), (events[2], written[2])):
            row = stores.events.record(event.event_id)
            assert row is not None
            assert (row.tt, row.partition, row.offset) == (w.log_time, w.partition, w.offset)
            memory = stores.vectors.get([event.event_id])[0]
            assert (memory.tt_from, memory.offset) == (w.log_time, w.offset)
        porto = stores.events.facts_as_of("acme", subject="ana", valid=year(2026))
        assert [(v.object, v.tt_from) for v in porto] == [("Porto", written[3].log_time)]
        assert result.content_hash == stores.content_hash()

    again = rebuild(topics.bootstrap, topics.events_topic, into, encoder=minilm,
                    keys=FileKeyStore(topics.keys_dir))
    assert again.records == 0 and again.content_hash == result.content_hash
