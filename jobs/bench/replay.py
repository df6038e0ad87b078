"""``memstack bench replay``: the whole replay job against the best a user could run instead.

``ratio`` = replay events/s over the WHOLE job ÷ the best baseline measured in the same run
with the same model and cores. The job is submitted to a warm replay service
(``memstack replay-service``, started by the bench before the clock: its own start is reported
apart as ``replay_service_start_s``, as a broker's start would be) and clocked by the client
from the request to the result: planning the bounds, the Flink job's start, processing, the
last commit, the vector indexes built, the stores closed. The best baseline is the faster of:

- the bare encoder in its best configuration: the texts of the log, in log order,
  ``EMBED_CALL`` texts per model call (the model sorts a call by length, batch 64), either one
  process with 2 torch threads or two processes with 1 thread each over the two halves of the
  log; model loaded and warmed up before its clock starts (a generous baseline);
- the one-process rebuild (:func:`memstack.pipelines.rebuild.rebuild`: read, embed, write
  every store), clocked around the call.

The cold replay is measured too (``cold_ratio``): a job in a fresh process, as ``memstack
replay`` without ``--service`` runs it (the gateway JVM's start inside the clock).
Reported apart for each: ``*_startup_s`` (the call to the start of processing: the first
record read and every prepare worker's model loaded), ``*_finish_s`` (the last commit to the
call's return), ``*_processing_events_per_s`` (not the headline). The live worker catching
up on the same log: ``live_events_per_s``, from its partition assignment to its last commit.

Both replays run at the parallelism ``memstack replay`` defaults to (the cores).
``verify_equal`` is 1 when the one-process rebuild, both replays and the live worker's stores
have equal content hashes. Every text in the log is distinct (:func:`conversation`), so no cache
(not even the live worker's, which exists for the session state) can skip the model.
Full run: 100,000 events; ``--quick``: 1,000.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstack.client import MemoryClient
from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.sealing import open_record
from memstack.foundation.settings import Settings
from memstack.jobs.bench.broker_env import broker_for
from memstack.jobs.bench.pipeline import Timed
from memstack.jobs.bench.workload import conversation
from memstack.jobs.measure import Report, Result
from memstack.pipelines.log_reader import read_bounded
from memstack.schemas.events import TEXT_KINDS, Event

EMBED_CALL = 1024
"""Texts per model call: the replay's own (``ReplaySpec.embed_batch``)."""


def _emit(settings: Settings, events: int) -> int:
    builder = EventBuilder(Defaults("bench", "helper"))
    batch: list[Event | dict[str, Any]] = []
    for i in range(events // 10):
        batch += conversation(builder, i)
    with MemoryClient("bench", "helper", settings=settings) as client:
        client.emit_confirmed(batch)
    return len(batch)


def _log_texts(settings: Settings) -> tuple[list[str], int]:
    records = list(read_bounded(settings.bootstrap, settings.events_topic))
    keys = FileKeyStore(settings.keys_dir)
    # What the replay embeds: texts of memory-row kinds (facts become versions, not vectors).
    opened = [open_record(r.value, keys) for r in records if r.value]
    return [t for e in opened if isinstance(e, Event) and e.kind in TEXT_KINDS
            and (t := e.text())], len(records)


def _embed_seconds(texts: list[str], threads: int, start: Any = None) -> float:
    """Seconds the bare model takes over ``texts`` (warmed up; after ``start`` when given),
    with the configured encoder (``MEMSTACK_ENCODER``), the one the replay itself runs."""
    from memstack.pipelines.embedding import make_encoder

    encoder = make_encoder(threads=threads).load()
    encoder.encode(texts[:64])  # warm-up
    if start is not None:
        start.wait()
    began = time.perf_counter()
    for i in range(0, len(texts), EMBED_CALL):
        encoder.encode(texts[i:i + EMBED_CALL])
    return time.perf_counter() - began


def _embed_half(args: tuple[list[str], Any]) -> float:
    return _embed_seconds(args[0], 1, args[1])


def _embed_only(settings: Settings, report: Report) -> tuple[float, float]:
    """Events/s of the bare model: one process × 2 threads, two processes × 1 thread."""
    texts, events = _log_texts(settings)
    one = events / _embed_seconds(texts, 2)
    report("embed only, 1 process x 2 threads: %d texts of %d events, %.0f ev/s "
           "(%d per call)", len(texts), events, one, EMBED_CALL)
    ctx = multiprocessing.get_context("spawn")
    half = len(texts) // 2
    with ctx.Manager() as manager, ctx.Pool(2) as pool:
        start = manager.Barrier(2)
        seconds = pool.map(_embed_half, [(texts[:half], start), (texts[half:], start)])
    two = events / max(seconds)
    report("embed only, 2 processes x 1 thread: %.0f ev/s (halves took %.1f s, %.1f s)",
           two, *seconds)
    return one, two


@dataclass(frozen=True)
class Replayed:
    """One replay run: events/s over the whole job, start-up and finish seconds, events/s
    while processing."""

    whole: float
    startup_s: float
    finish_s: float
    processing: float

    def figures(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_events_per_s": self.whole, f"{prefix}_startup_s": self.startup_s,
                f"{prefix}_finish_s": self.finish_s,
                f"{prefix}_processing_events_per_s": self.processing}


def _replay(settings: Settings, into: Path, parallelism: int, report: Report) -> Replayed:
    """One whole replay job in a fresh process, as ``memstack replay`` runs: the gateway JVM
    starts inside the clock (a second job in the same process would reuse the first one's
    JVM and leave its start-up out)."""
    # a non-daemonic worker that exits normally at shutdown: its JVM sees stdin close and exits
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        out, events = pool.submit(_replay_job, settings, into, parallelism).result()
    report("cold replay p=%d (own process): %d events in %.1f s = %.0f ev/s whole job "
           "(start-up %.1f s, finish %.1f s; %.0f ev/s while processing)", parallelism, events,
           events / out.whole, out.whole, out.startup_s, out.finish_s, out.processing)
    return out


def _replay_job(settings: Settings, into: Path, parallelism: int) -> tuple[Replayed, int]:
    from memstack.pipelines.replay.bounds import Earliest
    from memstack.pipelines.replay.job import ReplaySpec, timed_replay

    timed = timed_replay(ReplaySpec(into=into, start=Earliest(), parallelism=parallelism,
                                    work_dir=into.parent / "flink"), settings)
    return Replayed(timed.events_per_s, timed.startup_s, timed.finish_s,
                    timed.processing_events_per_s), timed.result.events


def _on_service(settings: Settings, work: Path, parallelism: int, events: int,
                report: Report) -> tuple[Replayed, float]:
    """Start ``memstack replay-service`` (its start timed apart), then one job on it clocked by
    the client from the request to the result; the service is stopped afterwards."""
    from memstack.jobs.replay_service.request import ReplayRequest
    from memstack.jobs.replay_service.service_process import ServiceProcess

    with ServiceProcess.start(settings, work / "replay-service", parallelism) as service:
        report("replay service ready in %.1f s (warm-up %.1f s) at %s", service.start_s,
               service.warm_up_s, service.url)
        began, began_at = time.perf_counter(), time.time()
        done = service.submit(ReplayRequest(into=str(work / "replay-service-stores"),
                                            parallelism=parallelism))
        seconds, ended_at = time.perf_counter() - began, time.time()
    out = Replayed(int(done["offsets"]) / seconds, float(done["first_at"]) - began_at,
                   ended_at - float(done["last_at"]), float(done["processing_events_per_s"]))
    report("replay on the warm service p=%d: %d events in %.1f s = %.0f ev/s whole job "
           "(start-up %.1f s, finish %.1f s; %.0f ev/s while processing)", parallelism,
           events, events / out.whole, out.whole, out.startup_s, out.finish_s, out.processing)
    return out, service.start_s


@dataclass
class Clocked(Timed):
    """The pipeline bench's commit-timing wrapper, plus when the worker was assigned."""

    assigned_at: float = 0.0

    def applied_offsets(self) -> dict[int, int]:
        if self.assigned_at == 0.0:
            self.assigned_at = time.time()
        return super().applied_offsets()


def _live(settings: Settings, into: Path, report: Report) -> float:
    """Events/s of the live worker catching up on the log, assignment to last commit."""
    from memstack.jobs.run import open_projector
    from memstack.pipelines.faust_app import build_live_app, run_worker
    from memstack.pipelines.live_batches import LiveConfig
    from memstack.pipelines.log_reader import end_offsets

    projector, stores = open_projector(into, settings, 2)
    projector.encoder.encode(["warm the model up before the clock starts"])
    timed = Clocked(projector)
    live = build_live_app(settings, LiveConfig(within_s=0.1), timed, stateful=projector)
    live.stop_at = end_offsets(settings.bootstrap, settings.events_topic)
    try:
        code = run_worker(live)
    finally:
        stores.close()
    if code != 0 or not timed.visible:
        raise RuntimeError(f"the live worker did not catch up (exit {code})")
    began = timed.assigned_at or min(timed.visible.values())
    seconds = max(timed.visible.values()) - began
    rate = len(timed.visible) / seconds
    report("live worker: %d events in %.1f s after assignment, %.0f ev/s", len(timed.visible),
           seconds, rate)
    return rate


def run(quick: bool, report: Report) -> Result:
    base = Settings.from_env()
    prefix = f"bench-replay-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="memstack-bench-replay-"))
    try:
        with broker_for(base.with_(topic_prefix=prefix, home=work / "home")) as settings:
            return _measure(settings, work, 1_000 if quick else 100_000, report)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rebuild_rate(settings: Settings, into: Path, events: int, report: Report) -> float:
    from memstack.pipelines.rebuild import rebuild

    began = time.perf_counter()
    rebuild(settings.bootstrap, settings.events_topic, into, keys=FileKeyStore(settings.keys_dir))
    rate = events / (time.perf_counter() - began)
    report("one-process rebuild (read, embed, write every store): %.0f ev/s", rate)
    return rate


def _measure(settings: Settings, work: Path, n: int, report: Report) -> Result:
    from memstack.pipelines.replay.verify import compare

    events = _emit(settings, n)
    report("emitted %d events to %s", events, settings.events_topic)
    embed_one, embed_two = _embed_only(settings, report)
    rebuild_rate = _rebuild_rate(settings, work / "rebuild", events, report)
    parallelism = os.cpu_count() or 1  # memstack replay's default
    cold = _replay(settings, work / "replay-cold", parallelism, report)
    warm, service_start_s = _on_service(settings, work, parallelism, events, report)
    live_rate = _live(settings, work / "live", report)
    diffs = {name: compare(work / "rebuild", work / name)
             for name in ("replay-cold", "replay-service-stores", "live")}
    for name, diff in diffs.items():
        report("verify rebuild vs %s: %s", name, "equal" if diff.equal else diff)
    baseline = max(embed_one, embed_two, rebuild_rate)
    report("whole job on the warm service %.0f ev/s (cold %.0f) vs best baseline %.0f ev/s: "
           "ratio %.3f (cold %.3f)", warm.whole, cold.whole, baseline, warm.whole / baseline,
           cold.whole / baseline)
    return Result("replay", ratio=warm.whole / baseline, figures={
        **warm.figures("replay"), "baseline_events_per_s": baseline,
        "ratio_processing": warm.processing / baseline,
        "replay_service_start_s": service_start_s,
        "cold_ratio": cold.whole / baseline, **cold.figures("replay_cold"),
        "parallelism": float(parallelism),
        "embed_only_1x2_events_per_s": embed_one, "embed_only_2x1_events_per_s": embed_two,
        "rebuild_events_per_s": rebuild_rate, "live_events_per_s": live_rate,
        "replay_vs_live": warm.whole / live_rate,
        "verify_equal": 1.0 if all(d.equal for d in diffs.values()) else 0.0,
        "events": float(events),
    })
