"""The PyFlink replay over SASL_SSL with SCRAM-SHA-512: the Flink Kafka source gets the one
security definition (``flink_properties``) and rebuilds the same stores as the one-process
rebuild, both reading as the service principal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memstack.client import MemoryClient
from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.keystore import FileKeyStore
from memstack.jobs.sample import sample_conversation
from memstack.pipelines.replay.bounds import Earliest, parse_point
from tests.integration.secure.conftest import SecureTopics

B = EventBuilder(Defaults("acme", "helper"))


@pytest.mark.slow
def test_the_replay_reads_the_log_over_sasl_ssl(secure_topics: SecureTopics,
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    from memstack.pipelines.rebuild import rebuild
    from memstack.pipelines.replay.job import ReplaySpec, run_replay
    from memstack.pipelines.replay.verify import compare

    settings = secure_topics.use(monkeypatch, "service")
    events = [e for i in range(2) for e in sample_conversation(B, f"s{i}")]
    with MemoryClient("acme", "helper", settings=settings) as client:
        client.emit_confirmed(events)
    rebuild(settings.bootstrap, settings.events_topic, tmp_path / "ref", batch=50,
            keys=FileKeyStore(settings.keys_dir))
    spec = ReplaySpec(into=tmp_path / "replay", start=Earliest(), stop=parse_point("end"),
                      work_dir=tmp_path / "flink", commit_batch=32, embed_batch=16,
                      worker_mode="loopback")
    before = dict(os.environ)
    result = run_replay(spec, settings)
    assert dict(os.environ) == before
    assert result.events == len(events)
    same = compare(tmp_path / "ref", tmp_path / "replay")
    assert same.equal, same.lines()
