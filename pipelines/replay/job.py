"""The replay job: the log between two points, through the live pipeline's projector, into a
stores directory, on PyFlink's local mini-cluster.

``run_replay(spec, settings)`` resolves the bounds once (end offsets captured at start), raises
every start to what the target stores already applied (their offsets are the truth: a replay
over existing stores catches them up), reads the forget ledger, then runs the topology of
:mod:`memstack.pipelines.replay.functions` and reports progress while it runs.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from memstack.foundation.settings import Settings
from memstack.pipelines.forgetting.ledger import ForgetLedger
from memstack.pipelines.replay import writer_mark
from memstack.pipelines.replay.bounds import Bounds, End, Point, resolve
from memstack.pipelines.replay.errors import ReplayJobError
from memstack.pipelines.replay.flink_env import (
    FlinkRuntime,
    WorkerMode,
    check_cluster,
    create_envs,
    process_state_kept,
)
from memstack.pipelines.replay.progress import Progress, ProgressTracker
from memstack.pipelines.replay.source import bounded_log
from memstack.pipelines.replay.wiring import (
    PrepareKey,
    ProjectorFactory,
    WriterConfig,
    open_projector,
)

if TYPE_CHECKING:
    from memstack.pipelines.replay.session_cluster import SessionCluster

log = logging.getLogger(__name__)

OnProgress = Callable[[ProgressTracker, float], None]


@dataclass(frozen=True)
class ReplaySpec:
    """What to replay, into where, how wide."""

    into: Path
    start: Point
    stop: Point = field(default_factory=End)
    parallelism: int = 1
    worker_mode: WorkerMode = "process"
    send_dead_letters: bool = False
    """Live already sent the dead letters of the same records; a catch-up may want them."""
    honour_forget: bool = True
    commit_batch: int = 1024
    embed_batch: int = 1024
    """Texts per model call: large, because the model sorts a call's texts by length (little
    padding) and the call runs on a background thread while records keep flowing."""
    prepare_key: PrepareKey = "record"
    """Spread the prepare stage by record (even load) or by session; the writer restores each
    partition's log order either way."""
    work_dir: Path | None = None
    cluster: str | None = None
    """A standalone Flink cluster's REST address ``HOST:PORT`` (None: the local mini-cluster)."""
    projector_factory: ProjectorFactory | None = None
    session: SessionCluster | None = None
    """A session cluster of this process to run on (the warm replay service's); it replaces
    ``cluster`` and ``worker_mode``."""
    ledger: ForgetLedger | None = None
    """The forget ledger as the caller read it (None: the job reads it at its start)."""


@dataclass(frozen=True)
class ReplayResult:
    bounds: Bounds
    progress: Progress | None
    seconds: float
    job_seconds: float

    @property
    def events(self) -> int:
        return self.bounds.total()

    @property
    def events_per_s(self) -> float:
        return self.bounds.total() / self.job_seconds if self.job_seconds > 0 else 0.0


@dataclass(frozen=True)
class TimedReplay:
    """A replay that applied something, timed from outside the whole call (start-up counts)."""

    result: ReplayResult
    progress: Progress
    """The job's last progress (the processing time and the events applied)."""
    seconds: float
    began_at: float
    """Wall clock (epoch s) when the call began."""

    @property
    def events_per_s(self) -> float:
        """Events over the whole call: stores, bounds, JVM, job start, processing, last commit,
        the vector indexes built and the stores closed."""
        return self.result.events / self.seconds

    @property
    def startup_s(self) -> float:
        """From the call to the start of processing (the first record read, every prepare
        worker's model loaded)."""
        return max(0.0, self.progress.first_at - self.began_at)

    @property
    def finish_s(self) -> float:
        """From the last commit to the call's return: the vector indexes built over what was
        written, the stores closed, the job torn down."""
        return max(0.0, self.seconds - self.startup_s - self.progress.processing_s)

    @property
    def processing_events_per_s(self) -> float:
        p = self.progress
        return p.applied / p.processing_s if p.processing_s > 0 else 0.0


def timed_replay(spec: ReplaySpec, settings: Settings) -> TimedReplay:
    """Run the replay and time the whole call; a replay that applied nothing is an error (its
    rates would be meaningless)."""
    began, began_at = time.perf_counter(), time.time()
    result = run_replay(spec, settings)
    seconds = time.perf_counter() - began
    if result.progress is None or result.progress.applied == 0:
        raise ReplayJobError(f"the replay into {spec.into} (parallelism {spec.parallelism}) "
                             "applied nothing: is the log empty, or were the stores already "
                             "caught up?")
    return TimedReplay(result, result.progress, seconds, began_at)


def plan_bounds(spec: ReplaySpec, settings: Settings, config: WriterConfig) -> Bounds:
    """The offsets to replay: resolved points, each start raised to the stores' offsets."""
    bounds = resolve(settings.bootstrap, settings.events_topic, spec.start, spec.stop)
    projector = open_projector(config)
    try:
        applied = projector.applied_offsets()
    finally:
        projector.close()
    caught_up = bounds.after(applied)
    if caught_up.start != bounds.start:
        log.info("replay: the stores already applied %s; starting at %s",
                 dict(applied), dict(caught_up.start))
    return caught_up


def run_replay(spec: ReplaySpec, settings: Settings, on_progress: OnProgress | None = None,
               *, every_s: float = 2.0) -> ReplayResult:
    """Run the replay job; the process's environment and root logger are as they were
    afterwards (:func:`~memstack.pipelines.replay.flink_env.process_state_kept`)."""
    with process_state_kept():
        return _run_replay(spec, settings, on_progress, every_s)


def _run_replay(spec: ReplaySpec, settings: Settings, on_progress: OnProgress | None,
                every_s: float) -> ReplayResult:
    started = time.monotonic()
    if spec.cluster is not None and spec.session is None:
        check_cluster(spec.cluster, spec.parallelism, spec.worker_mode)
    spec.into.mkdir(parents=True, exist_ok=True)
    config = writer_config(spec, settings)
    bounds = plan_bounds(spec, settings, config)
    if bounds.total() == 0:
        log.info("replay: nothing to do, the stores are at %s", dict(bounds.stop))
        return ReplayResult(bounds, None, time.monotonic() - started, 0.0)
    if spec.honour_forget:
        ledger = spec.ledger if spec.ledger is not None else ForgetLedger.load(
            settings.bootstrap, settings.forget_topic)
        config = replace(config, forget=ledger)
    rt = spec.session.runtime(spec.parallelism) if spec.session is not None else \
        FlinkRuntime(spec.work_dir or spec.into.parent / f".{spec.into.name}.flink",
                     spec.parallelism, spec.worker_mode, cluster=spec.cluster)
    tracker = ProgressTracker(bounds, time.monotonic())
    job_started = time.monotonic()
    final = _drive(build_job(rt, settings, bounds, config), tracker, on_progress, every_s, rt)
    _wait_released(spec.into)
    job_s = time.monotonic() - job_started
    log.info("replay: %d offsets in %.1f s (%.0f/s), %d applied, %d forgotten, "
             "%d dead letters", bounds.total(), job_s, bounds.total() / job_s,
             final.applied if final else 0, final.forgotten if final else 0,
             final.dead_letters if final else 0)
    return ReplayResult(bounds, final, time.monotonic() - started, job_s)


RELEASE_WAIT_S = 60.0


def _wait_released(into: Path) -> None:
    """Wait until the writer has closed its stores (its mark is gone:
    :mod:`~memstack.pipelines.replay.writer_mark`) and its process has let go of the DuckDB
    file. PyFlink may report the
    job finished while a Python worker process is still closing its stores (a clean-clone CI
    run opened them for the verify at that moment and got ``StoreLockedError``: "Conflicting
    lock is held in ... python3.11"). Only a lock held by another process is waited for, at
    most :data:`RELEASE_WAIT_S`; any other answer returns at once."""
    import duckdb

    from memstack.pipelines.stores.layout import DUCKDB_FILE

    writer_mark.wait_closed(into)  # a writer closing in this process (loopback) or another
    path, deadline = into / DUCKDB_FILE, time.monotonic() + RELEASE_WAIT_S
    while path.exists():
        try:
            duckdb.connect(str(path), read_only=True).close()
            return
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                return  # not a writer still closing; whoever opens the stores next says why
            time.sleep(0.05)
        except duckdb.Error:
            return


def writer_config(spec: ReplaySpec, settings: Settings) -> WriterConfig:
    """What the job's Python workers are given (no forget ledger yet: the driver adds it)."""
    return WriterConfig(
        into=spec.into.resolve(), topic=settings.events_topic, bootstrap=settings.bootstrap,
        dlq_topic=settings.dlq_topic, send_dead_letters=spec.send_dead_letters,
        commit_batch=spec.commit_batch, embed_batch=spec.embed_batch,
        embed_threads=max(1, (os.cpu_count() or 1) // spec.parallelism),
        prepare_key=spec.prepare_key,
        projector_factory=spec.projector_factory,
        keys_dir=settings.keys_dir)


def build_job(rt: FlinkRuntime, settings: Settings, bounds: Bounds,
              config: WriterConfig) -> Iterator[str]:
    """Submit the replay's topology over ``bounds``; iterate the writer's progress lines."""
    from pyflink.common import Types

    from memstack.pipelines.replay.functions import (
        BucketKey,
        CommitStage,
        LinkOffsets,
        PrepareStage,
        single_writer_key,
    )

    env, tenv = create_envs(rt)
    source_par = max(1, min(rt.parallelism, len(bounds.partitions)))
    env.set_parallelism(source_par)
    # key groups = subtasks: buckets spread over the prepare subtasks by one hash, not two
    # levels (128 key groups, then ranges), which left one of two subtasks ~5% more records
    env.set_max_parallelism(max(rt.parallelism, 1))
    rows = bounded_log(tenv, settings.bootstrap, bounds)
    linked = rows.map(LinkOffsets(bounds.topic)).name("link").uid("replay-link") \
        .set_parallelism(source_par)
    prepared = linked.key_by(BucketKey(config.buckets, config.prepare_key), key_type=Types.INT()) \
        .process(PrepareStage(config)).name("prepare").uid("replay-prepare") \
        .set_parallelism(rt.parallelism)
    committed = prepared.key_by(single_writer_key, key_type=Types.INT()) \
        .process(CommitStage(config), output_type=Types.STRING()).name("commit") \
        .uid("replay-commit").set_parallelism(1)
    it: Iterator[str] = committed.execute_and_collect("memstack-replay")
    return it


def _drive(results: Iterator[str], tracker: ProgressTracker, on_progress: OnProgress | None,
           every_s: float, rt: FlinkRuntime) -> Progress | None:
    """Collect the writer's progress on a thread; report every ``every_s`` until the end."""
    inbox: queue.Queue[str | BaseException | None] = queue.Queue()

    def pump() -> None:
        try:
            for line in results:
                inbox.put(line)
            inbox.put(None)
        except BaseException as exc:  # handed to the driver thread, which raises it
            inbox.put(exc)

    threading.Thread(target=pump, name="replay-collect", daemon=True).start()
    last_report = 0.0
    while True:
        try:
            msg = inbox.get(timeout=0.5)
        except queue.Empty:
            msg = ""
        now = time.monotonic()
        if isinstance(msg, BaseException):
            where = rt.log_dir if rt.cluster is None or rt.loopback_server else (
                f"the cluster's log folder (`memstack infra flink status`) and {rt.log_dir}")
            raise ReplayJobError(f"the replay job failed: {msg}; Flink's logs are in "
                                 f"{where}") from msg
        if msg:
            tracker.update(Progress.from_json(msg), now)
        if on_progress is not None and (msg is None or now - last_report >= every_s):
            on_progress(tracker, now)
            last_report = now
        if msg is None:
            return tracker.latest
