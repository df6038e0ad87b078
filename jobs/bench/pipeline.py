"""``memstack bench pipeline``: the live pipeline on a realistic mix, against the best a user
could run instead.

The workload (:func:`memstack.jobs.bench.workload.mix`) is every kind an agent emits:
messages, facts with supersession (each person moves), tool calls and results, observations,
notes, and a forget request of an earlier session after every 50 conversations; every text is
distinct. Side by side in one run, with the real Faust worker and StoreProjector (session
state and consolidation feed on, the worker's default batch of up to ``BATCH_MAX`` records,
flushed after 0.1 s when not full, 2 encoder threads):

- ``pipeline_events_per_s``: sustained rate from emit to queryable: a burst of ``burst``
  events is emitted at once and timed until the last is committed to DuckDB and LanceDB (the
  worker is started, assigned and warmed up with 100 events, which create the Lance table and
  its first indexes, before the clock starts). The burst and the paced phase write enough rows
  to cross the Lance maintenance threshold (``IndexPolicy.refresh_rows``): the
  maintenance passes during each phase are counted (``maintenance_*``);
- ``freshness_p50_s`` / ``freshness_p99_s``: emit -> committed (rows visible) per event while
  ``paced`` events arrive one by one at half the sustained rate, maintenance pauses included;
- the ceiling, the best baseline with the same model and cores: the faster of the bare
  encoder over the texts of the same events (64 texts per call as the worker, or 1,024 per
  call, whichever is faster; measured before and after the pipeline phases, the mean) and the
  one-process rebuild of the same log into fresh stores (:func:`memstack.pipelines.rebuild`).

``ratio`` = pipeline / ceiling (goal >= 0.85; freshness goal p99 <= 1 s). Full run: 5,000
events in the burst and 3,000 paced (the headline); ``--quick``: 600 and 200. Uses the broker
of ``memstack.foundation.settings`` (started when none runs) and its own topic prefix,
deleted afterwards.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.kafka_connect import first_address
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.jobs.bench.broker_env import scratch_deployment
from memstack.jobs.bench.cpu_share import (
    CpuWindow,
    EncoderCalls,
    listener_pid,
    non_encoder_share,
)
from memstack.jobs.bench.workload import mix, texts_of
from memstack.jobs.measure import Report, Result
from memstack.pipelines.contracts import Plan, Projector
from memstack.pipelines.embedding import CachingEncoder
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.stores import lance_maintenance
from memstack.schemas.events import Event, EventKind

if TYPE_CHECKING:
    from memstack.client import MemoryClient

TENANT = "bench"
WARM_UP = 100
"""Events through the pipeline before the clock starts (table creation, first index build)."""
FORGET_EVERY = 50
"""A forget request after every this many conversations (one per ~500 events)."""


@dataclass
class Timed:
    """A projector wrapper that records when each event's rows became visible (commit end)."""

    inner: Projector
    assigned: threading.Event = field(default_factory=threading.Event)
    visible: dict[str, float] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    batches: list[tuple[int, float]] = field(default_factory=list)
    """(events, commit seconds) per committed batch."""
    prepare_s: list[float] = field(default_factory=list)
    """Seconds of each ``prepare`` (parsing, embedding)."""

    def applied_offsets(self) -> dict[int, int]:
        offsets = self.inner.applied_offsets()
        self.assigned.set()
        return offsets

    def prepare(self, records: list[LogRecord]) -> Plan:
        started = time.perf_counter()
        plan = self.inner.prepare(records)
        self.prepare_s.append(time.perf_counter() - started)
        return plan

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


def embed_rate(encode: Callable[[list[str]], object], sample: list[str], events: int,
               per_call: int) -> float:
    """Events/s of ``encode`` over the texts of ``events`` events, ``per_call`` texts per call,
    on a fresh helper thread.

    The pipeline encodes on a helper thread too; measured here, encoding on the main thread
    of the bench process ran at ~60 % of the rate of any other thread (reason not found)."""
    def timed() -> float:
        started = time.perf_counter()
        for i in range(0, len(sample), per_call):
            encode(sample[i:i + per_call])
        return events / (time.perf_counter() - started)

    with ThreadPoolExecutor(1, thread_name_prefix="memstack-embed-bench") as pool:
        return pool.submit(timed).result()


class MaintenanceLog(logging.Handler):
    """Counts the Lance index maintenance passes (the index logs each one at INFO)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.passes = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("lance maintenance at"):
            self.passes += 1

    def __enter__(self) -> MaintenanceLog:
        logger = lance_maintenance.log  # the module that logs them (was lance_index's name)
        self._level = logger.level
        logger.setLevel(min(logger.getEffectiveLevel(), logging.INFO))
        logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logger = lance_maintenance.log
        logger.removeHandler(self)
        logger.setLevel(self._level)


@dataclass(frozen=True)
class Workload:
    """The events of each phase, built before anything is timed."""

    warm: list[Event]
    burst: list[Event]
    paced: list[Event]

    @classmethod
    def build(cls, burst: int, paced: int) -> Workload:
        builder = EventBuilder(Defaults(TENANT, "bench"))
        warm = mix(builder, 0, WARM_UP)
        first = WARM_UP // 10 + 1
        burst_events = mix(builder, first, burst, FORGET_EVERY)
        return cls(warm, burst_events, mix(builder, first + burst // 10 + 2, paced,
                                           FORGET_EVERY))


def run(quick: bool, report: Report) -> Result:
    burst, paced = (600, 200) if quick else (5000, 3000)
    with scratch_deployment(Settings.from_env()) as settings:
        return _measure(settings, Workload.build(burst, paced), report)


def _embed_rates(encode: Callable[[list[str]], object], work: Workload) -> dict[int, float]:
    sample = work.burst[:1024]
    texts = texts_of(sample)
    return {per_call: embed_rate(encode, texts, len(sample), per_call) for per_call in (64, 1024)}


def _measure(settings: Settings, work: Workload, report: Report) -> Result:
    from memstack.jobs.run import open_projector
    from memstack.pipelines.faust_app import build_live_app, run_worker
    from memstack.pipelines.live_batches import LiveConfig

    projector, stores = open_projector(settings.home / "stores", settings, 2)
    timed = Timed(projector)
    # The bare model for the side-by-side rate: the worker's encoder is a cache in front of it
    # (the session state re-reads turn vectors from it), which must not see these texts first.
    cached = projector.encoder  # the worker's CachingEncoder
    encoder = getattr(cached, "inner", cached)
    encoder.encode([f"warm-up text {i}: the model's first batches run slower" for i in range(128)])
    recording = EncoderCalls(encoder)  # the burst's encode calls, for non_encoder_cpu_share
    if isinstance(cached, CachingEncoder):
        cached.swap(recording)
    before = _embed_rates(encoder.encode, work)
    report("embed only: %s events/s (by texts per call)", {k: round(v) for k, v in before.items()})
    live = build_live_app(settings, LiveConfig(within_s=0.1), timed, stateful=projector)
    outcome: dict[str, float] = {}
    maintenance = MaintenanceLog()
    window = CpuWindow(client_id=f"memstack-bench-emitter-{os.getpid()}",
                       broker_pid=listener_pid(first_address(settings.bootstrap)[1]))
    driver = threading.Thread(target=_drive, args=(settings, timed, live.request_stop, work,
                                                   outcome, maintenance, report,
                                                   (window, recording)), daemon=True)
    try:
        with maintenance:
            driver.start()
            run_worker(live)
    finally:
        stores.close()
    driver.join(10)
    if "error" in outcome or "p99" not in outcome:
        raise RuntimeError(f"the pipeline phases did not finish: {outcome}")
    encoder_cpu = recording.replay_cpu_s()
    worker_cpu = window.process_s - window.client_s
    share = non_encoder_share(worker_cpu, encoder_cpu)
    report("CPU over the burst: worker %.1f s (process %.1f s less the emitter's %.1f s), "
           "broker %.1f s; the bare encoder on the same %d calls (%d texts) %.1f s: "
           "non-encoder share %.3f", worker_cpu, window.process_s, window.client_s,
           window.broker_s, len(recording.calls), recording.texts, encoder_cpu, share)
    after = _embed_rates(encoder.encode, work)
    embed = max((before[k] + after[k]) / 2 for k in before)
    rebuild_rate = _rebuild_rate(settings, report)
    ceiling = max(embed, rebuild_rate)
    report("embed only again: %s; ceiling %.1f events/s (embed %.1f, rebuild %.1f); pipeline "
           "%.1f events/s; ratio %.3f", {k: round(v) for k, v in after.items()}, ceiling, embed,
           rebuild_rate, outcome["pipeline"], outcome["pipeline"] / ceiling)
    figures = {"pipeline_events_per_s": outcome["pipeline"], "ceiling_events_per_s": ceiling,
               "embed_only_events_per_s": embed, "rebuild_events_per_s": rebuild_rate,
               "embed_64_per_call_events_per_s": (before[64] + after[64]) / 2,
               "embed_1024_per_call_events_per_s": (before[1024] + after[1024]) / 2,
               "freshness_p50_s": outcome["p50"], "freshness_p99_s": outcome["p99"],
               "freshness_max_s": outcome["max"], "burst_events": float(len(work.burst)),
               "paced_events": float(len(work.paced)), "paced_rate_per_s": outcome["paced_rate"],
               "forget_requests": float(sum(e.kind is EventKind.FORGET_REQUESTED
                                            for e in work.burst + work.paced)),
               "maintenance_burst": outcome["maintenance_burst"],
               "maintenance_paced": outcome["maintenance_paced"],
               "non_encoder_cpu_share": share, "worker_cpu_s": worker_cpu,
               "encoder_cpu_s": encoder_cpu, "emitter_cpu_s": window.client_s,
               "broker_cpu_s": window.broker_s if window.broker_pid is not None else math.nan,
               "encoded_texts": float(recording.texts),
               "encoder_busy_share": outcome["encoder_busy_share"]}
    return Result("pipeline", figures, ratio=outcome["pipeline"] / ceiling)


def _rebuild_rate(settings: Settings, report: Report) -> float:
    """Events/s of the one-process rebuild of the whole log (every phase) into fresh stores."""
    from memstack.pipelines.rebuild import rebuild

    began = time.perf_counter()
    result = rebuild(settings.bootstrap, settings.events_topic, settings.home / "rebuilt",
                     keys=FileKeyStore(settings.keys_dir))
    rate = result.events / (time.perf_counter() - began)
    report("one-process rebuild of the same log: %d events, %.1f events/s", result.events, rate)
    return rate


def _ids(events: list[Event]) -> list[str]:
    """The ids the worker commits (forget requests travel on their own topic)."""
    return [e.event_id for e in events if e.kind is not EventKind.FORGET_REQUESTED]


def _drive(settings: Settings, timed: Timed, stop: Callable[[str], None], work: Workload,
           outcome: dict[str, float], maintenance: MaintenanceLog, report: Report,
           cpu: tuple[CpuWindow, EncoderCalls]) -> None:
    """Runs beside the Faust worker: warm-up, burst, then paced events; then stops it."""
    from memstack.client import MemoryClient

    window, recording = cpu
    try:
        if not timed.assigned.wait(180):
            raise TimeoutError("the worker was not assigned its partitions within 180 s")
        time.sleep(1.0)
        with MemoryClient(TENANT, "bench", settings=settings,
                          client_id=window.client_id) as client:
            client.emit_many(work.warm)  # not timed: creates the Lance table and its indexes
            client.flush()
            timed.wait_for(_ids(work.warm), 300)
            passes = maintenance.passes
            started = time.time()
            timed.batches.clear()
            timed.prepare_s.clear()
            window.start()
            recording.recording = True
            client.emit_many(work.burst)
            client.flush()
            ids = _ids(work.burst)
            done = timed.wait_for(ids, 1200)
            recording.recording = False
            window.stop()
            outcome["encoder_busy_share"] = recording.busy_s / (done - started)
            outcome["pipeline"] = len(work.burst) / (done - started)
            outcome["maintenance_burst"] = float(maintenance.passes
                                                 - passes)
            sizes = [n for n, _ in timed.batches]
            report("pipeline: %d events emit -> visible in %.1f s: %.1f events/s; %d batches "
                   "of %.1f events, prepare (parse, embed) %.1f s, commit (Lance, DuckDB) "
                   "%.1f s in all; %d Lance maintenance passes", len(work.burst),
                   done - started, outcome["pipeline"], len(sizes), np.mean(sizes),
                   sum(timed.prepare_s), sum(t for _, t in timed.batches),
                   outcome["maintenance_burst"])
            passes = maintenance.passes
            _paced(client, timed, outcome, work.paced, outcome["pipeline"] / 2, report)
            outcome["maintenance_paced"] = float(maintenance.passes
                                                 - passes)
    except BaseException as exc:
        outcome["error"] = 1.0
        report("bench driver failed: %r", exc)
    finally:
        stop("benchmark finished")


def _paced(client: MemoryClient, timed: Timed, outcome: dict[str, float], events: list[Event],
           rate: float, report: Report) -> None:
    emitted: dict[str, float] = {}
    gap = 1.0 / rate
    next_at = time.monotonic()
    for event in events:
        time.sleep(max(0.0, next_at - time.monotonic()))
        sent_at = time.time()
        client.emit(event)
        client.flush()  # one event, sent now (as an agent would)
        if event.kind is not EventKind.FORGET_REQUESTED:
            emitted[event.event_id] = sent_at
        next_at += gap
    timed.wait_for(list(emitted), 600)
    lags = np.array([timed.visible[i] - t for i, t in emitted.items()])
    outcome.update(p50=float(np.percentile(lags, 50)), p99=float(np.percentile(lags, 99)),
                   max=float(lags.max()), paced_rate=rate)
    report("freshness at %.1f events/s: p50 %.3f s, p99 %.3f s, max %.3f s", rate,
           outcome["p50"], outcome["p99"], outcome["max"])

