"""``memstack bench scale``: live events/s with 1, 2 and 4 sharded workers on the same log.

For each worker count ``W`` in (1, 2, 4), side by side in one run, on the same events:

1. fresh topics (8 partitions, so every count divides them) and a fresh sharded root;
2. ``W`` ``memstack shards worker`` processes start (``--threads cores // W``, at least 1)
   and join one group; the clock waits until all of them own partitions and a warm-up of 4
   events per partition is applied (Lance tables created, model loaded), so start-up and
   joins are not measured;
3. the log is emitted at once (acks=all) and timed from the first send until every
   partition's shard applied it: ``events_per_s_w{W}``;
4. the workers stop (SIGTERM) and the shards are verified: the union of their records, fact
   entries, offsets and memories, and the fact versions recomputed from the union of the
   entries, hash equal to one store rebuilt from the same topic by one process
   (``pipelines/rebuild.py``, the same projector): ``verify_equal`` is 1 only when every
   count verified. The best of the three rebuilds' rates is reported too
(``rebuild_events_per_s``: one process, one store, batches of 2,000, model warm).

``scaling_w2`` = w2 / w1 (the ``ratio``), ``scaling_w4`` = w4 / w1, ``cores`` = the CPUs this
process may use. Side by side, the one-process deployment a user runs today, ``memstack serve``
over one store of the same log (``--threads cores``), timed the same way through its
``/healthz`` position: ``events_per_s_serve``. It does more per event than a sharded worker
(session state, consolidation feed, forget agent) and commits one store per batch instead of
one per partition in the batch, so it is context, not the ratio's denominator.

The goal (>= 1.8) applies where ``cores`` >= 4: on fewer cores the workers
share them and the curve is bounded by the cores, not by the design (docs/scaling.md;
``jobs/scale_bench_device.sh`` runs the same on a bigger machine). Full: ~1,900 events
(4 tenants x 8 sessions x 40 turns); ``--quick``: ~370.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

from memstack.client import MemoryClient
from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.infra.topics import ensure_topics
from memstack.jobs.bench.broker_env import delete_topics, scratch_deployment
from memstack.jobs.bench.scale.workload import scale_log
from memstack.jobs.measure import Report, Result
from memstack.schemas.events import Event
from memstack.server.router.fanout import Coverage, Fanout

PARTITIONS = 8
WORKERS = (1, 2, 4)
WARM_PER_PARTITION = 4


@dataclass(frozen=True)
class Sizes:
    tenants: int
    sessions: int
    turns: int


FULL, QUICK = Sizes(4, 8, 40), Sizes(2, 8, 16)


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def warm_up_log(partitions: int) -> list[Event]:
    """A few messages of a tenant of its own on (almost surely) every partition."""
    builder = EventBuilder(Defaults("warm-up", "scale-bench"))
    return [builder.message(f"w{i}", "user", f"warm-up message {i}")
            for i in range(WARM_PER_PARTITION * partitions)]


def emit(settings: Settings, events: list[Event]) -> None:
    with MemoryClient("_", "scale-bench", settings=settings) as client:
        for pending in client.emit_many(events):
            pending.get()


def run(quick: bool, report: Report) -> Result:
    sizes = QUICK if quick else FULL
    events = scale_log(sizes.tenants, sizes.sessions, sizes.turns)
    base = Settings.from_env().with_(partitions=PARTITIONS)
    figures: dict[str, float] = {"cores": cores(), "events": len(events)}
    verified = []
    with scratch_deployment(base) as settings, TemporaryDirectory(prefix="scale-") as tmp:
        figures["events_per_s_serve"] = _serve_rate(settings, Path(tmp) / "serve", events,
                                                    report)
        for workers in WORKERS:
            rate, rebuild_rate, equal = _one_count(settings, Path(tmp) / f"w{workers}",
                                                   workers, events, report)
            figures[f"events_per_s_w{workers}"] = rate
            figures["rebuild_events_per_s"] = max(rebuild_rate,
                                                  figures.get("rebuild_events_per_s", 0.0))
            figures[f"threads_per_worker_w{workers}"] = _threads(workers)
            verified.append(equal)
    figures["scaling_w2"] = figures["events_per_s_w2"] / figures["events_per_s_w1"]
    figures["scaling_w4"] = figures["events_per_s_w4"] / figures["events_per_s_w1"]
    figures["verify_equal"] = float(all(verified))
    report("scaling w2 %.2f, w4 %.2f on %d cores; verify_equal %d", figures["scaling_w2"],
           figures["scaling_w4"], cores(), figures["verify_equal"])
    return Result("scale", figures=figures, ratio=figures["scaling_w2"])


def _threads(workers: int) -> int:
    return max(1, cores() // workers)


def _one_count(base: Settings, tmp: Path, workers: int, events: list[Event],
               report: Report) -> tuple[float, float, bool]:
    settings = base.with_(topic_prefix=f"{base.topic_prefix}-w{workers}-{uuid.uuid4().hex[:4]}")
    names = ensure_topics(settings.bootstrap, settings.topic_prefix, PARTITIONS)
    try:
        rate = _ingest(settings, tmp, workers, events, report)
        return (rate, *_verify(settings, tmp, report))
    finally:
        delete_topics(settings, names)


def _ingest(settings: Settings, tmp: Path, workers: int, events: list[Event],
            report: Report) -> float:
    from memstack.jobs.shards import discover_workers, spawn_shard_worker, wait_for_cards

    root, names = tmp / "sharded", [f"w{i}" for i in range(workers)]
    (tmp / "logs").mkdir(parents=True, exist_ok=True)
    children = [spawn_shard_worker(settings, root, n, tmp / "logs" / f"{n}.log", "--threads",
                                   str(_threads(workers))) for n in names]
    fanout = Fanout(discover_workers(root, []), list(range(PARTITIONS)))
    try:
        wait_for_cards(root, names, timeout_s=600)
        _wait(fanout, lambda c: len(set(c.owners.values())) == workers and not c.missing)
        warm = warm_up_log(PARTITIONS)
        emit(settings, warm)
        _wait(fanout, lambda c: sum(c.applied.values()) >= len(warm))
        report("%d workers joined and warm (threads %d each); emitting %d events", workers,
               _threads(workers), len(events))
        began = time.monotonic()
        emit(settings, events)
        _wait(fanout, lambda c: sum(c.applied.values()) >= len(warm) + len(events), 0.1)
        elapsed = time.monotonic() - began
        report("%d workers: %d events in %.1f s: %.1f events/s", workers, len(events), elapsed,
               len(events) / elapsed)
        return len(events) / elapsed
    finally:
        fanout.close()
        _stop(children)


def _serve_rate(base: Settings, tmp: Path, events: list[Event], report: Report) -> float:
    """The one-process deployment (``memstack serve``: one store, session state and the
    consolidation feed on) on the same log, timed the same way through its ``/healthz``."""
    import httpx

    from memstack.jobs.service import spawn_service
    from memstack.pipelines.service.position import Position

    settings = base.with_(topic_prefix=f"{base.topic_prefix}-serve-{uuid.uuid4().hex[:4]}",
                          home=tmp / "home")
    names = ensure_topics(settings.bootstrap, settings.topic_prefix, PARTITIONS)
    tmp.mkdir(parents=True, exist_ok=True)
    child, url = spawn_service(settings, tmp / "serve.log", "--threads", str(cores()),
                               env={"MEMSTACK_API_KEYS": "scale-bench-key:_bench"},
                               timeout_s=600)

    def applied() -> int:
        token = httpx.get(f"{url}/healthz", timeout=10).json()["applied"]
        return sum(Position.parse(token).events.values())

    try:
        warm = warm_up_log(PARTITIONS)
        emit(settings, warm)
        _until(lambda: applied() >= len(warm), 0.5)
        began = time.monotonic()
        emit(settings, events)
        _until(lambda: applied() >= len(warm) + len(events), 0.1)
        rate = len(events) / (time.monotonic() - began)
        report("memstack serve (one process, one store): %.1f events/s", rate)
        return rate
    finally:
        _stop([child])
        delete_topics(settings, names)


def _until(done: Callable[[], bool], every_s: float, timeout_s: float = 1800) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the workers did not get there in {timeout_s:.0f} s")
        time.sleep(every_s)


def _wait(fanout: Fanout, done: Callable[[Coverage], bool], every_s: float = 0.5,
          timeout_s: float = 1800) -> None:
    _until(lambda: done(fanout.coverage()), every_s, timeout_s)


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()


def _verify(settings: Settings, tmp: Path, report: Report) -> tuple[float, bool]:
    from memstack.pipelines.embedding import shared_encoder
    from memstack.pipelines.rebuild import rebuild
    from memstack.pipelines.shards.verify import sharded_hashes, single_hashes

    result = rebuild(settings.bootstrap, settings.events_topic, tmp / "single",
                     encoder=shared_encoder(), keys=FileKeyStore(settings.keys_dir))
    sharded, single = sharded_hashes(tmp / "sharded"), single_hashes(tmp / "single")
    equal = sharded == single
    if not equal:
        report("verify: sharded %s != single %s", sharded, single)
    return result.events / result.seconds, equal
