"""Prometheus metrics of the live worker and the service (``/metrics``, ``--metrics-port``).

One :class:`LiveMetrics` per process, on a registry it owns (never the global default, so two
workers in one test process do not collide). The worker feeds it from its hooks: each committed
batch (events applied by kind, dead letters by reason, batch and commit latency, freshness),
each handled forget request (phases and their latencies); the service adds query latencies and
forget requests logged over HTTP. Lag and consolidation figures are read when scraped. Every
metric, and the alert a user would set on it, is in docs/operations.md ("## Metrics").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from memstack.pipelines.contracts import DeadLetter, Plan
from memstack.pipelines.live_batches import BatchTimes

if TYPE_CHECKING:
    from memstack.pipelines.consolidation.feeding import FeedStep
    from memstack.pipelines.faust_app import LiveApp
    from memstack.pipelines.forgetting.processor import ForgetOutcome, Hidden

log = logging.getLogger(__name__)

PREFIX = "memstack"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0)
FRESHNESS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
FORGET_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
QUERY_KINDS = ("facts", "history", "search", "records", "context")
LAG_CACHE_S = 1.0


def dead_letter_reason(letter: DeadLetter) -> tuple[str, str]:
    """``(reason, field)`` labels of a dead letter, from a small fixed vocabulary: the rule
    text itself is free-form (it names values), so it stays in the DLQ record, not a label."""
    field = letter.field.split(".", 1)[0].split("[", 1)[0] or "$"
    if letter.field == "$":
        reason = "not_json" if "JSON" in letter.reason and "object" not in letter.reason \
            else "not_an_object"
    elif letter.field == "sealed":
        reason = "unsealable"
    else:
        reason = "schema"
    return reason, field[:40]


class _ReadAtScrape(Collector):
    """Figures read from their owner when scraped (lag, consolidation totals)."""

    def __init__(self, read: Callable[[], Iterable[Metric]]) -> None:
        self._read = read

    def describe(self) -> Iterable[Metric]:
        return []  # nothing to read at registration (the broker may not answer yet)

    def collect(self) -> Iterable[Metric]:
        try:
            return list(self._read())
        except Exception as exc:  # a scrape must answer even when the broker does not
            log.warning("metrics: could not read a figure at scrape: %s", exc)
            return []


class LiveMetrics:
    """The process's metrics on its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.events_applied = Counter(f"{PREFIX}_events_applied", "Events applied to the stores, "
                                      "by kind", ["kind"], registry=r)
        self.dead_letters = Counter(f"{PREFIX}_dead_letters", "Records sent to the DLQ, by "
                                    "reason and the field that failed", ["reason", "field"],
                                    registry=r)
        self.batches = Histogram(f"{PREFIX}_batch_seconds", "One batch from prepare to committed "
                                 "(parse, operators, encoder, DLQ, stores)",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.commits = Histogram(f"{PREFIX}_commit_seconds", "The commit of one batch: the "
                                 "commit path's steps 4-8 (vectors, session state, LanceDB "
                                 "merge and DuckDB transaction, offsets, feed)",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.freshness = Histogram(f"{PREFIX}_freshness_seconds", "Log append time of an event "
                                   "to its batch committed in the stores",
                                   buckets=FRESHNESS_BUCKETS, registry=r)
        self.forgets = Counter(f"{PREFIX}_forget_requests", "Forget requests by phase reached: "
                               "logged (HTTP), received, invisible, applied, audited, "
                               "audit_failed, skipped", ["phase"], registry=r)
        self.forget_seconds = Histogram(f"{PREFIX}_forget_phase_seconds", "Seconds per forget "
                                        "phase: resolve, hide, probe, erase, audit, total "
                                        "(processor), log_to_invisible and log_to_applied "
                                        "(request logged to hidden, to erased and audited)",
                                        ["phase"], buckets=FORGET_BUCKETS, registry=r)
        self.queries = Histogram(f"{PREFIX}_query_seconds", "Read requests by kind, as the "
                                 "service answered them (with any after= wait)", ["kind"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.query_errors = Counter(f"{PREFIX}_query_errors", "Read requests answered 5xx or "
                                    "504 (after= timeout), by kind", ["kind", "status"],
                                    registry=r)
        self.loop_lag = Histogram(f"{PREFIX}_event_loop_lag_seconds", "How much later than due "
                                  "the worker's event loop woke, sampled every 0.1 s: the wait "
                                  "of anything due on the loop then (HTTP requests, batch "
                                  "steps)", buckets=LATENCY_BUCKETS, registry=r)
        for kind in QUERY_KINDS:
            self.queries.labels(kind)
        self._closers: list[Callable[[], None]] = []

    # --- fed by the worker -------------------------------------------------------------

    def observe_batch(self, plan: Plan, times: BatchTimes,
                      now: datetime | None = None) -> None:
        """After a batch committed (on the worker's loop)."""
        self.batches.observe(times.prepare_s + times.commit_s)
        self.commits.observe(times.commit_s)
        committed = now or datetime.now(UTC)
        for logged in plan.events:
            self.events_applied.labels(str(logged.event.kind)).inc()
            self.freshness.observe(max(0.0, (committed - logged.position.log_time)
                                       .total_seconds()))
        for letter in plan.dead_letters:
            self.dead_letters.labels(*dead_letter_reason(letter)).inc()

    def observe_hidden(self, hidden: Hidden | None, now: datetime | None = None) -> None:
        """After the worker handled a forget record (None: not a request, or done before)."""
        self.forgets.labels("received").inc()
        if hidden is None:
            self.forgets.labels("skipped").inc()
            return
        self.forgets.labels("invisible").inc()
        waited = ((now or datetime.now(UTC)) - hidden.request.log_time).total_seconds()
        self.forget_seconds.labels("log_to_invisible").observe(max(0.0, waited))

    def observe_forget(self, outcome: ForgetOutcome, now: datetime | None = None) -> None:
        """After the eraser erased and audited a request (on its thread)."""
        self.forgets.labels("applied").inc()
        self.forgets.labels("audited" if outcome.audit.passed else "audit_failed").inc()
        for phase, seconds in outcome.seconds.items():
            self.forget_seconds.labels(phase).observe(seconds)
        waited = ((now or datetime.now(UTC)) - outcome.request.log_time).total_seconds()
        self.forget_seconds.labels("log_to_applied").observe(max(0.0, waited))

    # --- fed by the service ------------------------------------------------------------

    def observe_query(self, kind: str, seconds: float, status: int) -> None:
        self.queries.labels(kind).observe(seconds)
        if status >= 500:
            self.query_errors.labels(kind, str(status)).inc()

    def forget_logged(self) -> None:
        self.forgets.labels("logged").inc()

    # --- read at scrape ----------------------------------------------------------------

    def read_at_scrape(self, read: Callable[[], Iterable[Metric]]) -> None:
        self.registry.register(_ReadAtScrape(read))

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on its own port (``memstack run --metrics-port``); the port."""
        from prometheus_client import start_http_server

        server, _ = start_http_server(port, addr=host, registry=self.registry)
        self._closers.append(server.shutdown)
        bound: int = server.server_address[1]
        log.info("metrics at http://%s:%d/metrics", host, bound)
        return bound

    def close(self) -> None:
        """Stop the metrics server and the broker look-ups of the lag."""
        for close in reversed(self._closers):
            close()
        self._closers.clear()


class LagReader:
    """Per-partition lag of the worker: the topic's end offset minus the applied offset.

    One consumer kept open for end-offset look-ups, read at most once per ``cache_s``."""

    def __init__(self, bootstrap: str, topics: Mapping[str, Callable[[], Mapping[int, int]]],
                 cache_s: float = LAG_CACHE_S) -> None:
        self._bootstrap = bootstrap
        self._applied = dict(topics)
        self._cache_s = cache_s
        self._lock = threading.Lock()
        self._consumer: Any = None
        self._ends: tuple[float, dict[str, dict[int, int]]] = (0.0, {})

    def _end_offsets(self) -> dict[str, dict[int, int]]:
        from kafka import TopicPartition

        from memstack.pipelines.log_reader import open_consumer, partitions_of

        with self._lock:
            at, ends = self._ends
            if time.monotonic() - at < self._cache_s:
                return ends
            if self._consumer is None:
                self._consumer = open_consumer(self._bootstrap)
            consumer = self._consumer
            fresh: dict[str, dict[int, int]] = {}
            for topic in self._applied:
                tps = [TopicPartition(topic, p) for p in partitions_of(consumer, topic)]
                fresh[topic] = {tp.partition: int(o)
                                for tp, o in consumer.end_offsets(tps).items()}
            self._ends = (time.monotonic(), fresh)
            return fresh

    def metrics(self) -> Iterable[Metric]:
        lag = GaugeMetricFamily(f"{PREFIX}_consumer_lag", "Records in the log not yet applied "
                                "by this worker (end offset - applied offset), per partition",
                                labels=["topic", "partition"])
        for topic, ends in self._end_offsets().items():
            applied = self._applied[topic]()
            for partition, end in sorted(ends.items()):
                lag.add_metric([topic, str(partition)],
                               max(0, end - applied.get(partition, 0)))
        yield lag

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None


def consolidation_metrics(totals: Callable[[], tuple[int, int]]) -> Iterable[Metric]:
    """``memstack_consolidation_updates_total{type=write|removal}`` from the feed's totals."""
    family = CounterMetricFamily(f"{PREFIX}_consolidation_updates", "Learner updates the "
                                 "worker published to the consolidation feed", labels=["type"])
    writes, removals = totals()
    family.add_metric(["write"], writes)
    family.add_metric(["removal"], removals)
    yield family


def attach(metrics: LiveMetrics, live: LiveApp, feed: FeedStep | None) -> LagReader:
    """Feed ``metrics`` from a live worker: batches, forgets, lag and the consolidation totals
    of ``feed`` (the commit path's feed step, None when off); ``metrics.close()`` closes the
    lag reader's consumer."""
    live.processor.observers.append(lambda plan, times: metrics.observe_batch(plan, times))
    live.on_forgot.append(lambda hidden: metrics.observe_hidden(hidden))
    live.on_erased.append(lambda outcome: metrics.observe_forget(outcome))
    settings = live.settings
    applied: dict[str, Callable[[], Mapping[int, int]]] = {
        settings.events_topic: live.processor.applied_offsets}
    forgetting = live.forgetting
    if forgetting is not None:
        applied[settings.forget_topic] = lambda: forgetting.next_offsets
    live.app.service(_loop_lag_service(metrics))
    lag = LagReader(settings.bootstrap, applied)
    metrics.read_at_scrape(lag.metrics)
    metrics._closers.append(lag.close)
    if feed is not None:
        metrics.read_at_scrape(lambda: consolidation_metrics(
            lambda: (feed.writes_total, feed.removals_total)))
    return lag


def _loop_lag_service(metrics: LiveMetrics) -> type:
    """A service of the worker's app that feeds ``memstack_event_loop_lag_seconds``
    (:mod:`memstack.pipelines.loop_lag`) while the worker runs."""
    import mode

    from memstack.pipelines.loop_lag import watch_loop_lag

    class LoopLag(mode.Service):
        @mode.Service.task
        async def _watch(self) -> None:
            await watch_loop_lag(metrics.loop_lag.observe)

    return LoopLag

