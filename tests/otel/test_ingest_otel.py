"""``memstack ingest otel`` on OTLP JSON records made by the OpenTelemetry SDK itself.

The records (tests/otel/data/genai_otlp.jsonl, made by tests/otel/genai_records.py) go to a
real Kafka topic with three malformed ones; the CLI ingests them; the events on the events
topic are checked: each turn once (the repeated history dropped, a repeated "yes" kept),
the tool call and result present, times from the spans, and the bad records in the DLQ.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kafka import KafkaProducer

from memstack.foundation.settings import Settings
from memstack.infra.topics import describe_topics, ensure_topics
from memstack.jobs.ingest_otel import DEFAULT_RETENTION_MS, IngestOptions, ensure_otel_topic
from memstack.jobs.run import worker_env
from memstack.pipelines import dlq
from memstack.pipelines.log_reader import read_bounded
from memstack.pipelines.otel.otlp import decode, signals
from memstack.pipelines.otel.turns import TurnLog
from memstack.schemas.events import Event
from tests.conftest import TEST_PARTITIONS, KafkaUnderTest
from tests.logged import open_logged
from tests.otel import genai_records

T0 = datetime(2025, 12, 1, 12, 0, tzinfo=UTC)
CONVERSATION = [  # conv-ana as memstack should remember it: (kind, what, seconds after T0)
    ("message", ("user", "Hi, I'm Ana and I live in Lisbon."), 0.0),
    ("message", ("assistant", "Hello Ana! How can I help?"), 1.0),
    ("message", ("user", "Find me a flat in Porto."), 10.0),
    ("tool_call", ("flat_search", "call-1"), 12.0),
    ("tool_result", ("flat_search", "3 flats found"), 12.5),
    ("message", ("assistant", "I found 3 flats in Porto. Shall I book a visit?"), 14.0),
    ("message", ("user", "yes"), 20.0),
    ("message", ("assistant", "Great. Morning or afternoon?"), 21.0),
    ("message", ("user", "yes"), 30.0),
    ("message", ("assistant", "Booked for the morning."), 31.0),
]
REPEATED = 22  # history turns the five calls (and the tool span) repeat


def lines() -> list[str]:
    return genai_records.DATA.read_text(encoding="utf-8").splitlines()


def described(event: Event) -> tuple[str, tuple[str, str], float]:
    p = event.payload
    what = ((p.role, p.text) if event.kind == "message"  # type: ignore[union-attr]
            else (p.tool, p.call_id) if event.kind == "tool_call"  # type: ignore[union-attr]
            else (p.tool, p.output))  # type: ignore[union-attr]
    return str(event.kind), what, (event.occurred_at - T0).total_seconds()


def test_the_committed_records_are_what_the_sdk_makes() -> None:
    assert genai_records.records() == lines()
    first = json.loads(lines()[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(first["traceId"]) == 32 and len(first["spanId"]) == 16  # hex, not base64
    assert isinstance(first["startTimeUnixNano"], str) and first["kind"] == 3


def test_the_ingest_needs_only_the_core_install() -> None:
    code = ("import sys, json; import memstack.jobs.ingest_otel; print(json.dumps(sorted("
            "m for m in sys.modules if m.split('.')[0] in ('torch', 'faust', 'duckdb', "
            "'lancedb', 'pyarrow', 'numpy', 'fastapi', 'opentelemetry', 'google'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_turns_are_deduplicated_in_order() -> None:
    turns = TurnLog()
    events = [e for line in lines() for s in signals(decode(line.encode()), "acme")
              for e in turns.events(s, "acme")]
    ana = [described(e) for e in events if e.session == "conv-ana"]
    assert ana == CONVERSATION
    assert turns.repeated == REPEATED
    bo = [e for e in events if e.session == "conv-bo"]
    assert [(e.payload.role, e.occurred_at) for e in bo] == [  # type: ignore[union-attr]
        ("user", T0 + timedelta(seconds=40)), ("assistant", T0 + timedelta(seconds=40))]
    assert {e.agent for e in events if e.session == "conv-ana"} == {"flat-agent"}
    call = next(e for e in events if e.kind == "tool_call")
    assert call.payload.arguments == {"city": "Porto"}  # type: ignore[union-attr]
    again = TurnLog()
    ids = [e.event_id for line in lines() for s in signals(decode(line.encode()), "acme")
           for e in again.events(s, "acme")]
    assert ids == [e.event_id for e in events]  # the same records make the same ids


def _settings(kafka: KafkaUnderTest, tmp_path: Any) -> Settings:
    prefix = f"t-otel-{uuid.uuid4().hex[:10]}"
    ensure_topics(kafka.bootstrap, prefix, TEST_PARTITIONS)
    return Settings(home=tmp_path, kafka_port=kafka.port, controller_port=kafka.controller_port,
                    bootstrap=kafka.bootstrap, topic_prefix=prefix, partitions=TEST_PARTITIONS)


def _ingest(settings: Settings, topic: str, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "memstack.cli", "ingest", "otel", "--topic", topic,
         "--tenant", "acme", "--until-caught-up", *extra],
        env=worker_env(settings), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


@pytest.mark.timeout(300)
def test_ingest_otel_from_kafka(kafka: KafkaUnderTest, tmp_path: Any) -> None:
    settings = _settings(kafka, tmp_path)
    topic = f"{settings.topic_prefix}.otlp"
    ensure_otel_topic(settings, IngestOptions(topic))
    info, = describe_topics(settings.bootstrap, [topic])
    assert info.configs["retention.ms"] == str(DEFAULT_RETENTION_MS)
    base64_ids = genai_records.records(hex_ids=False)[0]
    bad_messages = lines()[0].replace('\\"role\\": \\"user\\"', '\\"role\\": 7')
    assert bad_messages != lines()[0]
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
    for value in [*lines(), "this is not json", base64_ids, bad_messages]:
        producer.send(topic, key=b"otlp", value=value.encode())  # one partition: in order
    producer.flush(timeout=30)
    producer.close()

    summary = _ingest(settings, topic)
    assert summary["dead_letters"] == 3
    assert summary["skipped_records"] == 1  # the HTTP span: no GenAI content
    assert summary["repeated_turns"] == REPEATED
    events = [open_logged(settings, r.value) for r in read_bounded(settings.bootstrap,
                                                                   settings.events_topic)]
    assert summary["events"] == len(events) == len(CONVERSATION) + 2
    ana = sorted((e for e in events if e.session == "conv-ana"),
                 key=lambda e: (e.occurred_at, e.event_id))
    assert sorted(described(e) for e in ana) == sorted(CONVERSATION)
    assert all(e.tenant == "acme" and e.provenance.source == "otel" for e in events)

    letters = [dlq.decode(r.value or b"") for r in read_bounded(settings.bootstrap,
                                                                 settings.dlq_topic)]
    assert [letter.source_topic for letter in letters] == [topic] * 3
    fields = sorted(letter.field for letter in letters)
    assert fields[0] == "$" and any(f.endswith(".traceId") for f in fields)
    assert any(f.endswith("gen_ai.input.messages[0]") for f in fields), fields
    assert {letter.value for letter in letters} == {
        v.encode() for v in ("this is not json", base64_ids, bad_messages)}

    again = _ingest(settings, topic, "--group", "second-run")  # same records, same ids
    assert again["events"] == summary["events"]
    ids = [open_logged(settings, r.value).event_id for r in read_bounded(
        settings.bootstrap, settings.events_topic)]
    assert len(ids) == 2 * len(events) and set(ids) == {e.event_id for e in events}
