"""``memstack bench replay``: replay throughput against the embedding model's own speed.

On this CPU machine the embedding model is the physical limit, so ``ratio`` = replay events/s ÷
bare embedding events/s of the same texts with the same model in the same run. Replay events/s
is measured from the writer's first record to its last commit (JVM and worker start-up are
reported apart, as ``replay_startup_s``). The embedding cache is not used.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from memstack.builders import Defaults, EventBuilder
from memstack.client import MemoryClient
from memstack.jobs.broker_env import broker_for
from memstack.jobs.measure import Report, Result
from memstack.jobs.sample import sample_conversation
from memstack.pipelines.log_reader import read_bounded
from memstack.schemas.events import Event, parse_event
from memstack.settings import Settings


def _emit(settings: Settings, events: int) -> int:
    builder = EventBuilder(Defaults("bench", "helper"))
    batch: list[Event | dict[str, Any]] = []
    for i in range(events // 10):
        batch += sample_conversation(builder, f"s{i}")
    with MemoryClient("bench", "helper", settings=settings) as client:
        pending = client.emit_many(batch)
        client.flush()
        for p in pending:
            p.get()
    return len(batch)


def _embed_only(settings: Settings, report: Report) -> float:
    """Events/s of the bare model over the texts of the same log, batch 64."""
    from memstack.pipelines.embedding import MiniLMEncoder

    records = list(read_bounded(settings.bootstrap, settings.events_topic))
    texts = [t for r in records if r.value and (t := parse_event(r.value).text())]
    encoder = MiniLMEncoder().load()
    encoder.encode(texts[:64])  # warm-up
    began = time.perf_counter()
    for i in range(0, len(texts), 64):
        encoder.encode(texts[i:i + 64])
    seconds = time.perf_counter() - began
    report("embed only: %d texts of %d events in %.1f s", len(texts), len(records), seconds)
    return len(records) / seconds


def _replay(settings: Settings, into: Path, parallelism: int,
            report: Report) -> tuple[float, float]:
    from memstack.pipelines.replay.bounds import Earliest
    from memstack.pipelines.replay.job import ReplaySpec, run_replay

    spec = ReplaySpec(into=into, start=Earliest(), parallelism=parallelism,
                      work_dir=into.parent / "flink")
    result = run_replay(spec, settings)
    p = result.progress
    assert p is not None
    rate = p.applied / p.processing_s if p.processing_s > 0 else 0.0
    startup = result.job_seconds - p.processing_s
    report("replay p=%d: %d events, %.0f ev/s while processing, %.1f s start-up, %.1f s total",
           parallelism, p.applied, rate, startup, result.seconds)
    return rate, startup


def run(quick: bool, report: Report) -> Result:
    from memstack.pipelines.rebuild import rebuild
    from memstack.pipelines.replay.verify import compare

    base = Settings.from_env()
    prefix = f"bench-replay-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="memstack-bench-replay-"))
    with broker_for(base.with_(topic_prefix=prefix)) as settings:
        events = _emit(settings, 600 if quick else 3000)
        report("emitted %d events to %s", events, settings.events_topic)
        embed_rate = _embed_only(settings, report)
        began = time.perf_counter()
        rebuild(settings.bootstrap, settings.events_topic, work / "rebuild")
        rebuild_rate = events / (time.perf_counter() - began)
        report("simple rebuild (one process): %.0f ev/s", rebuild_rate)
        rate1, startup1 = _replay(settings, work / "replay-p1", 1, report)
        rate2, _ = _replay(settings, work / "replay-p2", 2, report)
        equal = compare(work / "rebuild", work / "replay-p1").equal and \
            compare(work / "rebuild", work / "replay-p2").equal
    report("live pipeline: not measured here (no bounded run of the Faust app yet); "
           "live_events_per_s is 0")
    shutil.rmtree(work, ignore_errors=True)
    best = max(rate1, rate2)
    return Result("replay", ratio=best / embed_rate, figures={
        "replay_events_per_s": best, "replay_p1_events_per_s": rate1,
        "replay_p2_events_per_s": rate2, "replay_startup_s": startup1,
        "embed_only_events_per_s": embed_rate, "rebuild_events_per_s": rebuild_rate,
        "live_events_per_s": 0.0, "verify_equal": 1.0 if equal else 0.0,
        "events": float(events),
    })
