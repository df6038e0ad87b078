"""`memstack forget apply` (no worker running) forgets in the live worker's session state too.

A worker skips requests its stores already applied, so an offline apply that left the state
alone would leave the forgotten terms in it for good. The state lives in the worker's changelog
topic; the offline apply reads its latest snapshots and writes the subtracted one back.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from memstack.cli import main
from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.operators.session_state.codec import restore_sums
from memstack.operators.session_state.keys import Head
from memstack.pipelines.embedding import CachingEncoder, MiniLMEncoder
from memstack.pipelines.faust_app import group_id
from memstack.pipelines.forgetting import ForgetLedger, rebuild_forgetting
from memstack.pipelines.forgetting.session_state_store import divergence
from memstack.pipelines.session_state.table import (
    KafkaSink,
    SessionStateUpdater,
    changelog_topic,
    ensure_changelog_topic,
    latest_snapshots,
)
from memstack.pipelines.stores.bundle import stores_dir
from tests.integration.test_live_state_forget import logged_events
from tests.integration.test_session_state_live import MemorySink


@pytest.mark.usefixtures("cli_topics")
def test_offline_apply_subtracts_from_the_workers_session_state(
    topics: Settings, minilm: MiniLMEncoder,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with MemoryClient("acme", "helper", settings=topics) as client:
        client.message("s1", "user", "the spare key hides under the third flowerpot")
        gone = client.message("s1", "user", "my bank PIN is 4471, do not tell anyone")
        client.fact("s1", "user:zoe", "lives_in", "Porto")
        client.message("s1", "assistant", "noted: lunch is at noon on Fridays")
    events = logged_events(topics)
    encoder = CachingEncoder(minilm)  # one vector per text for the state and the stores
    topic = changelog_topic(group_id(topics))
    ensure_changelog_topic(topics.bootstrap, topic, topics.partitions)
    sink = KafkaSink(topics.bootstrap, topic)
    asyncio.run(SessionStateUpdater(sink, sink, encoder).apply(events))  # the worker's state
    sink.close()
    rebuild_forgetting(topics.bootstrap, topics.events_topic, stores_dir(topics), ForgetLedger(),
                       FileKeyStore(topics.keys_dir), encoder=encoder)

    assert main(["forget", "event", gone.event_id, "--tenant", "acme"]) == 0
    request_id = capsys.readouterr().out.strip()
    assert main(["forget", "apply", "--json"]) == 0  # sealed: an event forget is ledger-only
    applied = json.loads(capsys.readouterr().out)
    assert not any(any(checks.values()) for checks in applied["audit"].values())

    state = restore_sums(latest_snapshots(topics.bootstrap, topic)["acme/s1"])
    clean_sink = MemorySink()
    clean = SessionStateUpdater(clean_sink, clean_sink, encoder)
    asyncio.run(clean.apply([e for e in events if e.event.event_id != gone.event_id]))
    want = clean.state("acme/s1")
    assert state.counts == (1, 2) and want is not None
    assert divergence(state, want, [Head.TURNS]) <= 1e-12  # the stored vector was subtracted
    assert applied["request_id"] == request_id
    assert applied["stores"]["session_state"]["deleted"] == {"terms": 1, "sessions": 0}
