"""Watching the live service: ``/metrics`` moves with what happens, spans follow GenAI names.

One ``memstack serve`` (real broker, stores, model) with tracing on (``MEMSTACK_OTEL=1``),
exporting with the standard OTLP/HTTP exporter to a loopback receiver. The test scrapes
``/metrics`` before and after writes, a malformed record (dead letter), a forget and queries,
and checks that the figures moved; the SDK (``MemoryService`` with an in-process
``InMemorySpanExporter``) and the service emit memory spans joined in one trace.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kafka import KafkaProducer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from memstack.foundation.settings import Settings
from memstack.jobs.service import spawn_service
from memstack.service.client import MemoryService
from tests.conftest import KafkaUnderTest
from tests.service.conftest import KEYS, Service, event, fact, fresh_settings, stop_service
from tests.service.otlp_receiver import OtlpReceiver, otlp_receiver

pytestmark = pytest.mark.timeout(600)

Figures = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def traced(kafka: KafkaUnderTest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Service, OtlpReceiver]]:
    settings = fresh_settings(kafka, tmp_path_factory)
    log = tmp_path_factory.mktemp("obs-log") / "serve.log"
    with otlp_receiver() as (receiver, endpoint):
        env = {"MEMSTACK_SEAL": "1", "MEMSTACK_API_KEYS_FILE": "",
               "MEMSTACK_API_KEYS": f"{KEYS['acme']}:acme", "MEMSTACK_OTEL": "1",
               "MEMSTACK_OTEL_CONTENT": "1",
               "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
               "OTEL_SERVICE_NAME": "memstack-under-test"}
        process, url = spawn_service(settings, log, "--within", "0.05", "--after-timeout", "60",
                                     env=env)
        service = Service(url, settings, process, log)
        try:
            yield service, receiver
        finally:
            assert stop_service(service) == 0, service.log_tail()


def scrape(url: str) -> Figures:
    response = httpx.get(f"{url}/metrics", timeout=30.0)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    figures: Figures = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            figures[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return figures


def total(figures: Figures, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for (n, ls), v in figures.items()
               if n == name and set(labels.items()) <= set(ls))


def lags(figures: Figures, topic: str) -> dict[str, float]:
    return {dict(ls)["partition"]: v for (n, ls), v in figures.items()
            if n == "memstack_consumer_lag" and dict(ls)["topic"] == topic}


def wait_for(check: Any, timeout_s: float = 60.0) -> None:
    """Until ``check()`` answers ``(True, ...)``; else fail showing its last answer."""
    deadline = time.monotonic() + timeout_s
    while not (answer := check())[0]:
        assert time.monotonic() < deadline, f"the figures did not move in time: {answer}"
        time.sleep(0.3)


def produce_raw(settings: Settings, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
    try:
        for value in values:
            producer.send(settings.events_topic, key=b"acme/s-raw", value=value)
        producer.flush(timeout=30)
    finally:
        producer.close()


def test_metrics_move_with_writes_dead_letters_forgets_and_queries(
        traced: tuple[Service, OtlpReceiver]) -> None:
    service, _ = traced
    before = scrape(service.url)
    assert total(before, "memstack_query_seconds_count", kind="facts") == 0
    with service.client() as client:
        sent = [event("acme", "s-metrics", f"the bike is in shed {i}") for i in range(3)]
        sent.append(fact("acme", "user:bo", "lives_in", "Faro"))
        written = client.post("/v1/tenants/acme/events", json={"events": sent}).json()
        token = written["position"]
        for route, params in [("facts", {"subject": "user:bo"}), ("history",
                              {"subject": "user:bo"}), ("records", {"session": "s-metrics"}),
                              ("search", {"text": "bike"}), ("context", {"text": "bike"})]:
            answer = client.get(f"/v1/tenants/acme/{route}", params={"after": token, **params})
            assert answer.status_code == 200, answer.text
        produce_raw(service.settings, [b"this is not json", b'{"kind": "message"}'])
        forgot = client.post("/v1/tenants/acme/forget", json={
            "scope": {"type": "session", "session": "s-metrics"}, "reason": "test"}).json()
        gone = client.get("/v1/tenants/acme/records", params={
            "after": forgot["position"], "session": "s-metrics"}).json()["records"]
        assert gone == []

    def settled() -> tuple[bool, float, float, dict[str, float]]:
        now = scrape(service.url)
        dead = total(now, "memstack_dead_letters_total")
        audited = total(now, "memstack_forget_requests_total", phase="audited")
        lag = lags(now, service.settings.events_topic)
        return (dead >= 2 and audited >= 1 and bool(lag) and set(lag.values()) == {0},
                dead, audited, lag)

    wait_for(settled)
    after = scrape(service.url)
    expectations = {
        ("memstack_events_applied_total", "kind", "message"): 3,
        ("memstack_events_applied_total", "kind", "fact_asserted"): 1,
        ("memstack_dead_letters_total", "reason", "not_json"): 1,
        ("memstack_dead_letters_total", "reason", "schema"): 1,
        ("memstack_forget_requests_total", "phase", "logged"): 1,
        ("memstack_forget_requests_total", "phase", "applied"): 1,
        ("memstack_forget_phase_seconds_count", "phase", "erase"): 1,
        ("memstack_forget_phase_seconds_count", "phase", "log_to_applied"): 1,
        ("memstack_consolidation_updates_total", "type", "write"): 1,
        **{("memstack_query_seconds_count", "kind", k): 1
           for k in ("facts", "history", "records", "search", "context")},
    }
    for (name, label, value), least in expectations.items():
        moved = total(after, name, **{label: value}) - total(before, name, **{label: value})
        assert moved >= least, f"{name}{{{label}={value!r}}} moved {moved}, expected >= {least}"
    for name in ("memstack_batch_seconds_count", "memstack_commit_seconds_count",
                 "memstack_event_loop_lag_seconds_count"):  # the loop's lag: 10 samples/s
        assert total(after, name) > total(before, name), name
    assert total(after, "memstack_freshness_seconds_count") - total(
        before, "memstack_freshness_seconds_count") >= 4
    assert total(after, "memstack_dead_letters_total", field="$") >= 1
    assert lags(after, service.settings.events_topic)  # one gauge per partition
    assert set(lags(after, service.settings.forget_topic).values()) == {0}


def test_sdk_and_service_spans_follow_the_genai_memory_conventions(
        traced: tuple[Service, OtlpReceiver]) -> None:
    service, receiver = traced
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with MemoryService(service.url, KEYS["acme"], tenant="acme",
                       tracer_provider=provider) as memory:
        wrote = memory.message("s-otel", "user", "my locker code is 12")
        updated = memory.fact("s-otel", "user:cy", "lives_in", "Braga")
        found = memory.search("locker code", after=wrote, session="s-otel")
        facts = memory.facts("user:cy", after=updated)
        forgot = memory.forget({"type": "session", "session": "s-otel"}, reason="test")
        # applied before the service stops, so the audit below sees it
        assert memory.records("s-otel", after=forgot).records == []
    assert found.hits and facts.facts
    sdk = {s.attributes["gen_ai.operation.name"]: s for s in exporter.get_finished_spans()
           if s.attributes is not None}
    assert set(sdk) == {"create_memory", "update_memory", "search_memory", "delete_memory"}
    create = sdk["create_memory"].attributes or {}
    assert create["gen_ai.memory.store.id"] == "acme" == create["memstack.tenant"]
    assert create["gen_ai.provider.name"] == "memstack"
    assert create["gen_ai.memory.record.id"] == wrote.written[0].event_id
    assert create["gen_ai.conversation.id"] == "s-otel"
    assert (sdk["delete_memory"].attributes or {})["gen_ai.memory.record.id"] == \
        forgot.request_id
    reads = [s for s in exporter.get_finished_spans()
             if (s.attributes or {}).get("gen_ai.operation.name") == "search_memory"]
    assert {tuple(s.attributes["memstack.event.kinds"]) for s in reads  # type: ignore[index]
            } == {("search",), ("facts",), ("records",)}
    counts = {s.attributes["memstack.event.kinds"][0]:  # type: ignore[index]
              (s.attributes or {}).get("gen_ai.memory.record.count") for s in reads}
    assert counts == {"search": len(found.hits), "facts": len(facts.facts), "records": 0}

    sdk_ids = {format(s.context.span_id, "016x"): format(s.context.trace_id, "032x")
               for s in exporter.get_finished_spans()}

    def exported() -> tuple[bool, list[str]]:  # the service's spans, via the OTLP exporter
        missing = [op for op in ("create_memory", "update_memory", "search_memory",
                                 "delete_memory")
                   if not [s for s in receiver.named(op) if s["parent_span_id"] in sdk_ids]]
        return not missing, missing

    wait_for(exported, 30.0)
    for operation in ("create_memory", "update_memory", "search_memory", "delete_memory"):
        served = [s for s in receiver.named(operation) if s["parent_span_id"] in sdk_ids]
        assert served, f"no {operation} span of the service joined the SDK's trace"
        span = served[0]
        assert span["trace_id"] == sdk_ids[span["parent_span_id"]]
        assert span["kind"] == 2  # SERVER
        attributes = span["attributes"]
        assert attributes["gen_ai.memory.store.id"] == "acme"
        assert attributes["gen_ai.provider.name"] == "memstack"
        assert attributes["http.response.status_code"] == 200
    search = [s for s in receiver.named("search_memory")
              if s["attributes"].get("gen_ai.memory.query.text") == "locker code"]
    assert search and search[0]["attributes"]["gen_ai.conversation.id"] == "s-otel"
    update = receiver.named("update_memory")[0]["attributes"]
    assert update["memstack.event.kinds"] == ["fact_asserted"]
    assert update["gen_ai.memory.record.count"] == 1
