"""Against the real broker: forget, then rebuild from offset 0 through the ledger.

The forgotten content is in no rebuilt store, the rebuild equals the forgotten live stores,
payloads whose key was destroyed are unreadable in Kafka, and even a rebuild holding an old
copy of the keys resurrects nothing (the ledger filters it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.sealing import Shredded, open_record
from memstack.foundation.settings import Settings
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.forgetting import (
    ForgetLedger,
    ForgetProcessor,
    ForgetStores,
    KafkaLineage,
    rebuild_forgetting,
)
from memstack.pipelines.forgetting.keys import rotate_before_request
from memstack.pipelines.forgetting.processor import apply_pending
from memstack.pipelines.log_reader import read_bounded
from memstack.schemas.events import ForgetScope
from memstack.schemas.sealed import SealedEvent, parse_record

SECRET = "the vault code is 4471 behind the blue painting"


def test_forget_holds_through_replay_and_the_log(topics: Settings, minilm: MiniLMEncoder,
                                                 tmp_path: Path) -> None:
    keys = FileKeyStore(topics.keys_dir)
    with MemoryClient("acme", "helper", settings=topics, keys=keys) as client:
        secret = client.note("s1", SECRET)
        client.fact("s1", "user:ana", "lives_in", "Lisbon")
        odd = client.note("s2", "my shoe size is 43 and I hate loafers")
        kept = client.note("s2", "the team offsite moved to Thursday afternoon")
        client.flush()
    backup = tmp_path / "old-keys"
    shutil.copytree(topics.keys_dir, backup)
    live = tmp_path / "live"
    empty = ForgetLedger()
    rebuild_forgetting(topics.bootstrap, topics.events_topic, live, empty, keys, encoder=minilm)

    with MemoryClient("acme", "helper", settings=topics, keys=keys) as client:
        s1 = ForgetScope(type="session", session="s1")
        assert rotate_before_request(keys, "acme", s1)  # what `memstack forget` does first
        client.forget(s1, reason="user asked")
        client.forget({"type": "event", "event_id": odd.event_id}, reason="typo")
        client.flush()
        later = client.note("s1", "a new note in s1 after the forget")
        client.flush()
    ledger = ForgetLedger.load(topics.bootstrap, topics.forget_topic)
    assert len(ledger) == 2
    lineage = KafkaLineage(topics.bootstrap, topics.events_topic, keys)
    with ForgetStores(live) as stores:
        processor = ForgetProcessor(stores, keys=keys, lineage=lineage, encoder=minilm)
        outcomes = apply_pending(processor, ledger.requests)
        assert [o.audit.passed for o in outcomes] == [True, True]
        assert outcomes[0].audit.notes["log_shredded"] == 2
        assert outcomes[1].audit.notes["log_ledger_only"] == 1
        assert apply_pending(processor, ledger.requests) == []
    caught_up = rebuild_forgetting(topics.bootstrap, topics.events_topic, live, ledger, keys,
                                   encoder=minilm)  # catch up: the later s1 note is new data
    live_hash = caught_up.content_hash
    assert caught_up.applied == 1, caught_up

    for record in read_bounded(topics.bootstrap, topics.events_topic):
        parsed = parse_record(record.value or b"")
        assert isinstance(parsed, SealedEvent)
        assert SECRET.encode() not in (record.value or b"")
        if parsed.event_id == secret.event_id:
            assert isinstance(open_record(record.value or b"", keys), Shredded)

    into = tmp_path / "replay"
    result = rebuild_forgetting(topics.bootstrap, topics.events_topic, into, ledger, keys,
                                encoder=minilm)
    with ForgetStores(into) as rebuilt:
        assert {r.event_id for r in rebuilt.stores.events.records("acme")} == {
            kept.event_id, later.event_id}
        assert rebuilt.stores.events.facts_as_of("acme") == []
        assert rebuilt.stores.content_hash() == live_hash
    assert (result.forgotten, result.shredded) == (1, 2)

    # An old copy of the keys (taken before the forget) opens the forgotten payloads again:
    # the ledger still keeps them out (the later note's fresh key is not in that copy).
    old = rebuild_forgetting(topics.bootstrap, topics.events_topic, tmp_path / "old",
                             ledger, FileKeyStore(backup), encoder=minilm)
    with ForgetStores(tmp_path / "old") as rebuilt:
        assert {r.event_id for r in rebuilt.stores.events.records("acme")} == {kept.event_id}
        assert rebuilt.stores.events.facts_as_of("acme") == []
    assert (old.forgotten, old.shredded) == (3, 1)
