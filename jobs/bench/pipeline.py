"""``memstack bench pipeline``: the live pipeline's throughput and freshness against its ceiling.

Side by side in one process, with one MiniLM encoder (batch 64, 2 torch threads):

- ``embed_only_events_per_s``: the bare encoder over the same texts in batches of 64, measured
  before, between (worker idle) and after the pipeline phases; the median, since the machine
  is shared;
- ``pipeline_events_per_s``: sustained rate from emit to queryable: a burst of events is emitted
  to Kafka at once and timed until the last one is committed to DuckDB and LanceDB by the real
  Faust worker and StoreProjector (the worker is started, assigned and warmed up with 96
  events, which create the Lance table and its first indexes, before the clock starts);
- ``freshness_p50_s`` / ``freshness_p99_s``: emit -> committed (rows visible) per event while
  events arrive at half the sustained rate.

``ratio`` = pipeline / embed-only (goal >= 0.8; freshness goal p99 <= 2 s). Uses the broker of
``memstack.settings`` (started when none runs) and its own topic prefix, deleted afterwards.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import TYPE_CHECKING

import numpy as np

from memstack.jobs.measure import Report, Result
from memstack.pipelines.contracts import Plan, Projector
from memstack.pipelines.log_reader import LogRecord
from memstack.settings import Settings

if TYPE_CHECKING:
    from memstack.client import MemoryClient

TENANT = "bench"
WARM_UP = 96
"""Events through the pipeline before the clock starts (table creation, first index build)."""
SUBJECTS = ("the deploy", "Ana's flight", "the invoice", "a flaky test", "the garden", "lunch")
VERBS = ("moved to", "was postponed until", "depends on", "needs a review before", "is fine after")


def texts(n: int) -> list[str]:
    """Short agent-turn texts (10-20 words), deterministic and all different."""
    out = []
    for i in range(n):
        subject, verb = SUBJECTS[i % len(SUBJECTS)], VERBS[(i // 3) % len(VERBS)]
        out.append(f"Turn {i}: the user says {subject} {verb} step {i % 17}, and asks "
                   f"me to remember it for session {i % 5}.")
    return out


@dataclass
class Timed:
    """A projector wrapper that records when each event's rows became visible (commit end)."""

    inner: Projector
    assigned: threading.Event = field(default_factory=threading.Event)
    visible: dict[str, float] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    batches: list[tuple[int, float]] = field(default_factory=list)
    """(events, commit seconds) per committed batch."""

    @property
    def encoder(self) -> object:
        """The inner projector's encoder, so the worker keeps its session state on."""
        return getattr(self.inner, "encoder", None)

    def applied_offsets(self) -> dict[int, int]:
        offsets = self.inner.applied_offsets()
        self.assigned.set()
        return offsets

    def prepare(self, records: list[LogRecord]) -> Plan:
        return self.inner.prepare(records)

    def commit(self, plan: Plan) -> None:
        started = time.perf_counter()
        self.inner.commit(plan)
        self.batches.append((len(plan.events), time.perf_counter() - started))
        now = time.time()
        with self.changed:
            for logged in plan.events:
                self.visible[logged.event.event_id] = now
            self.changed.notify_all()

    def close(self) -> None:
        self.inner.close()

    def wait_for(self, ids: list[str], timeout_s: float) -> float:
        """Wait until every id is visible; return the time the last one became visible."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while not all(i in self.visible for i in ids):
                if not self.changed.wait(max(0.0, deadline - time.monotonic())):
                    missing = sum(1 for i in ids if i not in self.visible)
                    raise TimeoutError(f"{missing} events not visible after {timeout_s:.0f} s")
            return max(self.visible[i] for i in ids)


def embed_rate(encode: Callable[[list[str]], object], sample: list[str]) -> float:
    """Texts/s of ``encode`` over ``sample`` in batches of 64, on a fresh helper thread.

    The pipeline encodes on a helper thread too; measured here, encoding on the main thread
    of the bench process ran at ~60 % of the rate of any other thread (reason not found)."""
    def timed() -> float:
        started = time.perf_counter()
        for i in range(0, len(sample), 64):
            encode(sample[i:i + 64])
        return len(sample) / (time.perf_counter() - started)

    with ThreadPoolExecutor(1, thread_name_prefix="memstack-embed-bench") as pool:
        return pool.submit(timed).result()


def ensure_broker(settings: Settings, report: Report) -> None:
    from memstack.infra.broker import KafkaBroker
    from memstack.infra.net import can_connect

    host, port = settings.bootstrap.rsplit(",", 1)[0].rsplit(":", 1)
    if can_connect(host, int(port)):
        return
    report("no broker at %s; starting one in %s", settings.bootstrap, settings.kafka_dir)
    KafkaBroker(settings.kafka_dir, settings.kafka_port, settings.controller_port).start(120)


def run(quick: bool, report: Report) -> Result:
    from memstack.infra.topics import ensure_topics

    base = Settings.from_env()
    ensure_broker(base, report)
    burst, paced, embed_n = (256, 60, 128) if quick else (1024, 200, 512)
    with TemporaryDirectory(prefix="memstack-bench-") as home:
        settings = base.with_(home=Path(home), topic_prefix=f"bench-{uuid.uuid4().hex[:8]}")
        names = ensure_topics(settings.bootstrap, settings.topic_prefix, settings.partitions)
        try:
            return _measure(settings, burst, paced, embed_n, report)
        finally:
            _delete(settings, names)


def _measure(settings: Settings, burst: int, paced: int, embed_n: int,
             report: Report) -> Result:
    from memstack.jobs.run import open_projector
    from memstack.pipelines.faust_app import build_live_app, run_worker
    from memstack.pipelines.live import LiveConfig

    projector, stores = open_projector(settings.home / "stores", settings, 2, 64)
    timed = Timed(projector)
    sample = texts(burst)
    # The bare model for the side-by-side rate: the worker's encoder is a cache in front of it
    # (the session state re-reads turn vectors from it), which must not see these texts first.
    cached = projector.encoder  # type: ignore[attr-defined]  # the worker's CachingEncoder
    encoder = getattr(cached, "inner", cached)
    embed_sample = sample[:embed_n]
    embed_rate(encoder.encode, texts(128)[-128:])  # warm-up: the first batches run slower
    rates = [embed_rate(encoder.encode, embed_sample)]
    report("embed only: %.1f events/s (%d texts, batch 64)", rates[0], len(embed_sample))
    live = build_live_app(settings, LiveConfig(batch_max=64, within_s=0.1), timed)
    outcome: dict[str, float] = {}

    def embed_between() -> None:  # the worker is idle between the two phases
        rates.append(embed_rate(encoder.encode, embed_sample))
        report("embed only (worker idle): %.1f events/s", rates[-1])

    driver = threading.Thread(target=_drive, args=(settings, timed, live.request_stop, sample,
                                                   paced, outcome, report, embed_between),
                              daemon=True)
    driver.start()
    try:
        run_worker(live)
    finally:
        stores.close()
    driver.join(10)
    if "error" in outcome or "pipeline" not in outcome:
        raise RuntimeError(f"the pipeline phases did not finish: {outcome}")
    rates.append(embed_rate(encoder.encode, embed_sample))
    embed = float(np.median(rates))
    report("embed only again: %.1f events/s (median of %s: %.1f); pipeline %.1f events/s; "
           "ratio %.2f", rates[-1], [round(r, 1) for r in rates], embed, outcome["pipeline"],
           outcome["pipeline"] / embed)
    figures = {"pipeline_events_per_s": outcome["pipeline"], "embed_only_events_per_s": embed,
               "freshness_p50_s": outcome["p50"], "freshness_p99_s": outcome["p99"],
               "burst_events": float(burst), "paced_events": float(paced),
               "paced_rate_per_s": outcome["paced_rate"]}
    return Result("pipeline", figures, ratio=outcome["pipeline"] / embed)


def _drive(settings: Settings, timed: Timed, stop: Callable[[str], None], sample: list[str],
           paced: int, outcome: dict[str, float], report: Report,
           between: Callable[[], None]) -> None:
    """Runs beside the Faust worker: burst, then paced events; then stops the worker."""
    from memstack.client import MemoryClient

    try:
        if not timed.assigned.wait(180):
            raise TimeoutError("the worker was not assigned its partitions within 180 s")
        time.sleep(1.0)
        with MemoryClient(TENANT, "bench", settings=settings) as client:
            # Warm-up (not timed): creates the Lance table and its first indexes.
            warm = [client.message(f"w{i % 8}", "user", "warm-up " + text).event_id
                    for i, text in enumerate(texts(WARM_UP))]
            client.flush()
            timed.wait_for(warm, 300)
            started = time.time()
            timed.batches.clear()
            ids = [client.message(f"s{i % 8}", "user", text).event_id
                   for i, text in enumerate(sample)]
            client.flush()
            done = timed.wait_for(ids, 600)
            outcome["pipeline"] = len(ids) / (done - started)
            sizes = [n for n, _ in timed.batches]
            report("pipeline: %d events emit -> visible in %.1f s: %.1f events/s; %d batches "
                   "of %.1f events, commit (embed + Lance + DuckDB) %.1f s in all", len(ids),
                   done - started, outcome["pipeline"], len(sizes), np.mean(sizes),
                   sum(t for _, t in timed.batches))
            between()
            _paced(client, timed, outcome, paced, outcome["pipeline"] / 2, report)
    except BaseException as exc:
        outcome["error"] = 1.0
        report("bench driver failed: %r", exc)
    finally:
        stop("benchmark finished")


def _paced(client: MemoryClient, timed: Timed, outcome: dict[str, float], n: int, rate: float,
           report: Report) -> None:
    emitted: dict[str, float] = {}
    gap = 1.0 / rate
    next_at = time.monotonic()
    for i, text in enumerate(texts(n)):
        time.sleep(max(0.0, next_at - time.monotonic()))
        sent_at = time.time()
        emitted[client.message(f"p{i % 8}", "user", "paced " + text).event_id] = sent_at
        client.flush()  # one event, sent now (as an agent would)
        next_at += gap
    timed.wait_for(list(emitted), 300)
    lags = np.array([timed.visible[i] - t for i, t in emitted.items()])
    outcome.update(p50=float(np.percentile(lags, 50)), p99=float(np.percentile(lags, 99)),
                   paced_rate=rate)
    report("freshness at %.1f events/s: p50 %.3f s, p99 %.3f s, max %.3f s", rate,
           outcome["p50"], outcome["p99"], float(lags.max()))


def _delete(settings: Settings, names: list[str]) -> None:
    from memstack.infra.net import admin_client

    try:
        with admin_client(settings.bootstrap) as admin:
            admin.delete_topics(names, raise_errors=False)
    except Exception:  # cleanup must not hide the result
        pass
