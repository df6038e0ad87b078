"""Spans of the clients: GenAI memory operations, off by default, no hard OpenTelemetry import.

``MemoryClient`` against the real broker with an in-process ``InMemorySpanExporter``; the HTTP
client and the service are checked end to end in tests/service/test_observability.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memstack.client import MemoryClient
from memstack.foundation.telemetry import memory_tracer, operation_of
from tests.conftest import KafkaUnderTest, settings_on_fresh_topics

OFF = """
import json, sys
from memstack import MemoryClient, MemoryService
from memstack.foundation.telemetry import memory_tracer
service = MemoryService("http://127.0.0.1:9", "key", tenant="acme")
print(json.dumps([service.tracer is None, memory_tracer() is None,
                  sorted(m for m in sys.modules if m.startswith("opentelemetry"))]))
"""


def test_tracing_is_off_by_default_and_imports_no_opentelemetry() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MEMSTACK_OTEL"}
    done = subprocess.run([sys.executable, "-c", OFF], capture_output=True, text=True,
                          timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [True, True, []]


def test_without_the_api_there_are_no_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_OTEL", "1")
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    assert memory_tracer() is None


def test_false_means_never_traced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_OTEL", "1")
    assert memory_tracer(False) is None
    assert memory_tracer(TracerProvider()) is not None


def test_operation_of_event_kinds() -> None:
    assert operation_of(["message", "tool_call"]) == "create_memory"
    assert operation_of(["fact_asserted", "fact_retracted"]) == "update_memory"
    assert operation_of(["forget_requested"]) == "delete_memory"
    assert operation_of(["message", "fact_asserted"]) == "create_memory"


def test_memory_client_emits_one_span_per_event(kafka: KafkaUnderTest,
                                                tmp_path: Path) -> None:
    settings = settings_on_fresh_topics(kafka, tmp_path, "t-otel-sdk")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryClient("acme", "planner", settings=settings, tracer_provider=provider) as client:
        said = client.message("s1", "user", "I live in Lisbon")
        learned = client.fact("s1", "user:ana", "lives_in", "Lisbon")
        forgot = client.forget({"type": "session", "session": "s1"}, reason="asked")
    spans = exporter.get_finished_spans()
    got = [(s.name, dict(s.attributes or {})) for s in spans]
    assert [name for name, _ in got] == ["create_memory acme", "update_memory acme",
                                         "delete_memory acme"]
    for (_, attributes), event in zip(got, (said, learned, forgot), strict=True):
        assert attributes["gen_ai.operation.name"] == {
            "message": "create_memory", "fact_asserted": "update_memory",
            "forget_requested": "delete_memory"}[str(event.kind)]
        assert attributes["gen_ai.memory.record.id"] == event.event_id
        assert attributes["gen_ai.memory.store.id"] == "acme" == attributes["memstack.tenant"]
        assert attributes["gen_ai.provider.name"] == "memstack"
        assert attributes["gen_ai.memory.record.count"] == 1
        assert attributes["memstack.event.kinds"] == (str(event.kind),)
    assert got[0][1]["gen_ai.conversation.id"] == "s1"
    assert all(s.kind.name == "CLIENT" for s in spans)


def test_async_memory_client_spans_a_batch(kafka: KafkaUnderTest, tmp_path: Path) -> None:
    import asyncio

    from memstack.aio import AsyncMemoryClient

    settings = settings_on_fresh_topics(kafka, tmp_path, "t-otel-aio")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def write() -> None:
        async with AsyncMemoryClient("acme", "a", settings=settings,
                                     tracer_provider=provider) as client:
            await client.emit_many([client.events.fact("s2", "user:bo", "likes", "tea"),
                                    client.events.retract("s2", "user:bo", "likes", "tea")])

    asyncio.run(write())
    span, = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.name == "update_memory acme"
    assert attributes["gen_ai.memory.record.count"] == 2
    assert attributes["memstack.event.kinds"] == ("fact_asserted", "fact_retracted")
    assert "gen_ai.memory.record.id" not in attributes  # a batch names no single record
