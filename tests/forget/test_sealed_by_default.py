"""Sealed by default: with no MEMSTACK_SEAL set, a session forget and its physical phase leave
no plaintext of the session in any Kafka segment file, DuckDB or LanceDB file (the raw bytes are
read), and the audit passes. With MEMSTACK_SEAL=0 the same steps leave the text in the segment
files and the audit, the request and the apply all say "log not erased: sealing is off"."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from memstack.cli import main
from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import SEALING_OFF, Settings
from memstack.infra.broker import LOG_DIRS
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.forgetting import ForgetLedger, rebuild_forgetting
from memstack.pipelines.stores.bundle import stores_dir
from tests.conftest import KafkaUnderTest


def _segment_dirs(kafka: KafkaUnderTest, settings: Settings) -> list[Path]:
    """The broker's partition folders of this test's topics (events, forget, dlq, keys)."""
    if kafka.broker is None:
        pytest.skip("an external broker (MEMSTACK_TEST_BOOTSTRAP): its segment files are not here")
    root = kafka.broker.data_dir / LOG_DIRS
    found = [d for d in root.iterdir() if d.name.startswith(f"{settings.topic_prefix}.")]
    assert any(d.name.startswith(f"{settings.events_topic}-") for d in found), found
    return found


def _files_holding(needle: bytes, folders: list[Path]) -> list[Path]:
    return [f for d in folders for f in d.rglob("*") if f.is_file() and needle in f.read_bytes()]


def _write_and_index(settings: Settings, minilm: MiniLMEncoder, secret: str) -> None:
    with MemoryClient("acme", "bot", settings=settings) as client:  # no keys given: the default
        client.message("s-gone", "user", secret)
        client.note("s-gone", f"the user said: {secret}")
        client.message("s-keep", "user", "I water the basil every three days")
    rebuild_forgetting(settings.bootstrap, settings.events_topic, stores_dir(settings),
                       ForgetLedger(), FileKeyStore(settings.keys_dir), encoder=minilm)


def _forget_session(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    assert main(["forget", "session", "s-gone", "--tenant", "acme", "--reason", "erase"]) == 0
    out = capsys.readouterr()
    return out.out.strip(), out.err


@pytest.mark.timeout(300)
def test_a_default_deployment_leaves_no_plaintext_of_a_forgotten_session(
        cli_topics: Settings, kafka: KafkaUnderTest, minilm: MiniLMEncoder,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("MEMSTACK_SEAL", raising=False)
    settings = Settings.from_env()
    assert settings.seal and settings.topic_prefix == cli_topics.topic_prefix
    secret = f"my locker code is {uuid.uuid4().hex[:10]} at the Graca gym"
    _write_and_index(settings, minilm, secret)
    store_files = [stores_dir(settings)]
    assert _files_holding(b"basil", store_files)  # the stores hold the kept session's text

    request_id, warned = _forget_session(capsys)
    assert SEALING_OFF not in warned
    assert main(["forget", "apply", "--json"]) == 0
    applied = json.loads(capsys.readouterr().out.strip())
    assert applied["request_id"] == request_id and applied["passed"]
    assert main(["forget", "audit", request_id, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["notes"]["log_shredded"] == 2

    needle = secret.encode()
    assert _files_holding(needle, store_files) == []
    assert _files_holding(needle, _segment_dirs(kafka, settings)) == []
    assert _files_holding(b"basil", _segment_dirs(kafka, settings)) == []  # sealed, not erased


@pytest.mark.timeout(300)
def test_an_unsealed_deployment_reports_the_log_as_not_erased(
        cli_topics: Settings, kafka: KafkaUnderTest, minilm: MiniLMEncoder,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MEMSTACK_SEAL", "0")
    settings = Settings.from_env()
    secret = f"my locker code is {uuid.uuid4().hex[:10]} at the Graca gym"
    _write_and_index(settings, minilm, secret)

    request_id, warned = _forget_session(capsys)
    assert f"memstack: warning: {SEALING_OFF} (MEMSTACK_SEAL=0)" in warned
    assert main(["forget", "apply"]) == 1
    out = capsys.readouterr().out
    assert f"{request_id} session s-gone" in out and "audit FAIL" in out
    assert f"log/log: 2 ({SEALING_OFF} for 2 payload(s) of the scope" in out
    assert main(["forget", "audit", request_id, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["table"]["log"]["log"] == 2
    assert {r["check"] for r in report["residuals"]} == {"log"}  # the stores are clean

    needle = secret.encode()
    assert _files_holding(needle, [stores_dir(settings)]) == []
    assert _files_holding(needle, _segment_dirs(kafka, settings))  # still in the log


@pytest.mark.timeout(300)
def test_a_forget_on_a_mixed_log_shreds_the_sealed_part_and_names_the_rest(
        cli_topics: Settings, minilm: MiniLMEncoder, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A log written unsealed first (before sealing was on) and sealed later."""
    monkeypatch.delenv("MEMSTACK_SEAL", raising=False)
    settings = Settings.from_env()
    with MemoryClient("acme", "bot", settings=settings.with_(seal=False)) as client:
        client.message("s-gone", "user", "written before sealing was on")
    with MemoryClient("acme", "bot", settings=settings) as client:
        client.message("s-gone", "user", "written sealed")
        client.message("s-keep", "user", "I water the basil every three days")
    rebuild_forgetting(settings.bootstrap, settings.events_topic, stores_dir(settings),
                       ForgetLedger(), FileKeyStore(settings.keys_dir), encoder=minilm)

    request_id, warned = _forget_session(capsys)
    assert warned == ""  # sealing is on: the request has nothing to warn about
    assert main(["forget", "apply"]) == 1
    out = capsys.readouterr().out
    assert f"log/log: 1 ({SEALING_OFF} for 1 payload(s) of the scope, written unsealed" in out
    assert main(["forget", "audit", request_id, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["notes"]["log_shredded"] == 1 and report["table"]["log"]["log"] == 1
    assert {r["check"] for r in report["residuals"]} == {"log"}
