"""`memstack forget SCOPE`, `forget apply` and `forget audit` against the real broker."""

from __future__ import annotations

import json

import pytest

from memstack.cli import main
from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.forgetting import ForgetLedger, rebuild_forgetting
from memstack.pipelines.stores.bundle import stores_dir


@pytest.mark.usefixtures("cli_topics")
def test_request_apply_audit_from_the_command_line(
    topics: Settings, minilm: MiniLMEncoder,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keys = FileKeyStore(topics.keys_dir)
    with MemoryClient("acme", "helper", settings=topics, keys=keys) as client:
        client.note("s9", "the spare key hides under the third flowerpot", subject="user:zoe")
        kept = client.note("s8", "lunch is at noon on Fridays")
    rebuild_forgetting(topics.bootstrap, topics.events_topic, stores_dir(topics), ForgetLedger(),
                       keys, encoder=minilm)

    assert main(["forget", "subject", "user:zoe", "--tenant", "acme", "--reason", "gdpr"]) == 0
    request_id = capsys.readouterr().out.strip()
    assert main(["forget", "apply", "--json"]) == 0
    applied = json.loads(capsys.readouterr().out.strip())
    assert applied["request_id"] == request_id and applied["passed"] and applied["events"] == 1
    assert main(["forget", "audit", request_id, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["notes"]["log_shredded"] == 1
    assert main(["forget", "apply"]) == 0 and capsys.readouterr().out == ""
    assert main(["forget", "audit", "01a227ce-0000-7000-8000-000000000000"]) == 2
    rows = rebuild_forgetting(topics.bootstrap, topics.events_topic, topics.home / "again",
                              ForgetLedger.load(topics.bootstrap, topics.forget_topic), keys,
                              encoder=minilm)
    assert rows.applied == 1 and kept.event_id
