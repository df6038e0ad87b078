"""The replay deployable: settings + spec + the PyFlink runtime, with terminal progress."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

from memstack.pipelines.replay.bounds import parse_point
from memstack.pipelines.replay.flink_env import WorkerMode
from memstack.pipelines.replay.job import ReplayResult, ReplaySpec, run_replay
from memstack.pipelines.replay.progress import ProgressTracker
from memstack.pipelines.replay.wiring import PrepareKey
from memstack.settings import Settings


def printer(stream: TextIO = sys.stderr) -> object:
    def show(tracker: ProgressTracker, now: float) -> None:
        for line in tracker.render(now):
            print(line, file=stream, flush=True)
    return show


def main(*, start: str, stop: str, into: Path, parallelism: int = 1,
         worker_mode: WorkerMode = "process", send_dead_letters: bool = False,
         honour_forget: bool = True, embed_batch: int = 1024,
         prepare_key: PrepareKey = "record", flink: str | None = None,
         settings: Settings | None = None) -> ReplayResult:
    settings = settings or Settings.from_env()
    spec = ReplaySpec(into=into.resolve(), start=parse_point(start), stop=parse_point(stop),
                      parallelism=parallelism, worker_mode=worker_mode,
                      send_dead_letters=send_dead_letters, honour_forget=honour_forget,
                      embed_batch=embed_batch, prepare_key=prepare_key, cluster=flink)
    return run_replay(spec, settings, printer())  # type: ignore[arg-type]  # a ProgressTracker callback


def summary(result: ReplayResult) -> str:
    p = result.progress
    return json.dumps({
        "offsets": result.events, "applied": p.applied if p else 0,
        "forgotten": p.forgotten if p else 0, "dead_letters": p.dead_letters if p else 0,
        "positions": {str(k): v for k, v in (p.positions if p else result.bounds.stop).items()},
        "seconds": round(result.seconds, 2),
        "processing_events_per_s": round(p.applied / p.processing_s, 1)
        if p and p.processing_s > 0 else None,
    })
