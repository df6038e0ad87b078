"""The metrics' pure logic: what a batch, a forget and a query add, and the label vocabulary.

A hand-made ``ForgetOutcome``-shaped object stands in for the processor's (pure logic only);
the live figures are tested against the real service in tests/service/test_observability.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.operators.log import LoggedEvent, LogPosition
from memstack.pipelines.contracts import DeadLetter, Plan
from memstack.pipelines.live_batches import BatchTimes
from memstack.pipelines.metrics import LiveMetrics, consolidation_metrics, dead_letter_reason
from memstack.server.observe import route_of

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def samples(metrics: LiveMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def letter(field: str, rule: str) -> DeadLetter:
    return DeadLetter("t.events", 0, 7, None, b"x", rule, field)


def test_a_batch_counts_kinds_dead_letters_latency_and_freshness() -> None:
    build = EventBuilder(Defaults(tenant="acme", agent="a", source="test"))
    events = [build.message("s1", "user", "hi"), build.fact("s1", "user:a", "likes", "tea")]
    logged = [LoggedEvent(e, LogPosition(NOW - timedelta(seconds=2), 0, i))
              for i, e in enumerate(events)]
    plan = Plan(logged, [], [letter("$", "not valid UTF-8 JSON: x"),
                             letter("payload.text", "Field required")], {0: 4})
    metrics = LiveMetrics()
    metrics.observe_batch(plan, BatchTimes(0.03, 0.02), now=NOW)
    got = samples(metrics)
    assert got[("memstack_events_applied_total", (("kind", "message"),))] == 1
    assert got[("memstack_events_applied_total", (("kind", "fact_asserted"),))] == 1
    assert got[("memstack_dead_letters_total", (("field", "$"), ("reason", "not_json")))] == 1
    assert got[("memstack_dead_letters_total", (("field", "payload"), ("reason", "schema")))] == 1
    assert got[("memstack_batch_seconds_sum", ())] == 0.05
    assert got[("memstack_commit_seconds_count", ())] == 1
    assert got[("memstack_freshness_seconds_count", ())] == 2
    assert got[("memstack_freshness_seconds_bucket", (("le", "1.0"),))] == 0
    assert got[("memstack_freshness_seconds_bucket", (("le", "2.0"),))] == 2


def test_dead_letter_reasons_come_from_a_small_vocabulary() -> None:
    assert dead_letter_reason(letter("$", "an event must be a JSON object")) == (
        "not_an_object", "$")
    assert dead_letter_reason(letter("sealed", "ciphertext does not authenticate")) == (
        "unsealable", "sealed")
    assert dead_letter_reason(letter("events[3].occurred_at", "bad")) == ("schema", "events")


def test_forget_phases_and_latencies() -> None:
    metrics = LiveMetrics()
    request = SimpleNamespace(log_time=NOW - timedelta(seconds=3))
    passed = SimpleNamespace(request=request, audit=SimpleNamespace(passed=True),
                             seconds={"resolve": 0.1, "erase": 0.5, "audit": 0.2, "total": 0.8})
    hidden = SimpleNamespace(request=SimpleNamespace(log_time=NOW - timedelta(seconds=1)))
    metrics.observe_hidden(hidden, now=NOW)  # type: ignore[arg-type]
    metrics.observe_hidden(None, now=NOW)
    metrics.observe_forget(passed, now=NOW)  # type: ignore[arg-type]
    metrics.forget_logged()
    got = samples(metrics)
    phases = {dict(k[1])["phase"]: v for k, v in got.items()
              if k[0] == "memstack_forget_requests_total"}
    assert phases == {"received": 2, "invisible": 1, "applied": 1, "audited": 1, "skipped": 1,
                      "logged": 1}
    assert got[("memstack_forget_phase_seconds_sum", (("phase", "log_to_invisible"),))] == 1.0
    assert got[("memstack_forget_phase_seconds_sum", (("phase", "log_to_applied"),))] == 3.0
    assert got[("memstack_forget_phase_seconds_sum", (("phase", "erase"),))] == 0.5


def test_queries_and_consolidation_and_two_registries_apart() -> None:
    one, two = LiveMetrics(), LiveMetrics()
    one.observe_query("facts", 0.004, 200)
    one.observe_query("search", 30.0, 504)
    one.read_at_scrape(lambda: consolidation_metrics(lambda: (5, 2)))
    got = samples(one)
    assert got[("memstack_query_seconds_count", (("kind", "facts"),))] == 1
    assert got[("memstack_query_seconds_count", (("kind", "history"),))] == 0
    assert got[("memstack_query_errors_total", (("kind", "search"), ("status", "504")))] == 1
    assert got[("memstack_consolidation_updates_total", (("type", "write"),))] == 5
    assert got[("memstack_consolidation_updates_total", (("type", "removal"),))] == 2
    assert samples(two)[("memstack_query_seconds_count", (("kind", "facts"),))] == 0


def test_routes_that_are_memory_operations() -> None:
    assert route_of("GET", "/v1/tenants/acme/search") == ("acme", "search")
    assert route_of("POST", "/v1/tenants/acme/events") == ("acme", "events")
    assert route_of("POST", "/v1/tenants/acme/forget") == ("acme", "forget")
    assert route_of("GET", "/v1/tenants/acme/forget/01abc") is None
    assert route_of("GET", "/v1/tenants/acme/changes") is None
    assert route_of("GET", "/metrics") is None
    assert route_of("POST", "/v1/tenants/acme/search") is None
