"""The consolidation job: Ray actors over the feed partitions, until caught up or forever.

``run_job`` starts (or joins, with ``MEMSTACK_RAY_ADDRESS``) Ray, splits the feed partitions
over the actors, and drives them in rounds of ``progress_every_s``, logging per-partition
offsets against the end offsets, the rate and an ETA. Checkpoints go under
``<MEMSTACK_HOME>/consolidation/checkpoints/<group>/``; the centring vector of new learners is
computed once from the encoder and kept in ``<MEMSTACK_HOME>/consolidation/centre.pt``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from memstack.infra.ray import RayConfig, gpu_available, start_ray, stop_ray
from memstack.operators.consolidation import FeatureConfig, LearnerConfig
from memstack.pipelines.consolidation.actor import (
    WorkerConfig,
    WorkerStatus,
    actor_class,
    assign_partitions,
)
from memstack.pipelines.consolidation.producer import ensure_feed_topic
from memstack.pipelines.log_reader import end_offsets
from memstack.settings import Settings

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class JobConfig:
    actors: int = 1
    until_caught_up: bool = False
    dim: int = 2048
    window: int = 1024
    checkpoint_every: int = 8192
    keep: int = 5
    progress_every_s: float = 10.0
    max_s: float | None = None
    learner: LearnerConfig | None = field(default=None)

    def learner_config(self) -> LearnerConfig:
        return self.learner or LearnerConfig(features=FeatureConfig(dim=self.dim))


def consolidation_dir(settings: Settings) -> Path:
    return settings.home / "consolidation"


def checkpoint_root(settings: Settings) -> Path:
    return consolidation_dir(settings) / "checkpoints"


def job_centre(settings: Settings) -> torch.Tensor:
    """The learners' centring vector: computed once with MiniLM, then read from its file."""
    path = consolidation_dir(settings) / "centre.pt"
    if path.exists():
        centre: torch.Tensor = torch.load(path, weights_only=True)
        return centre
    from memstack.pipelines.consolidation.distill import reference_centre
    from memstack.pipelines.embedding import shared_encoder

    centre = reference_centre(shared_encoder())
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(centre, path)
    return centre


def run_job(settings: Settings, config: JobConfig, *, centre: torch.Tensor | None = None,
            progress: Progress | None = None) -> list[WorkerStatus]:
    """Run the actors; return their final status (after a last checkpoint)."""
    say = progress or (lambda line: log.info("%s", line))
    topic = ensure_feed_topic(settings)
    centre = job_centre(settings) if centre is None else centre
    start_ray(RayConfig.from_settings(settings))
    handles: list[Any] = []
    try:
        ends = end_offsets(settings.bootstrap, topic)
        groups = assign_partitions(sorted(ends), config.actors)
        for group in groups:
            gpu = gpu_available()
            worker = WorkerConfig(settings.bootstrap, topic, group, checkpoint_root(settings),
                                  config.learner_config(), centre,
                                  "cuda" if gpu else "cpu", config.window,
                                  config.checkpoint_every, config.keep)
            handles.append(actor_class(1.0 if gpu else 0.0).remote(worker))
        say(f"consolidating {topic}: {len(handles)} actor(s) over partitions {groups}, "
            f"end offsets {ends}")
        return _drive(handles, ends if config.until_caught_up else None, config, say)
    finally:
        import ray

        for handle in handles:
            ray.kill(handle)
        stop_ray()


def _drive(handles: list[Any], stop: dict[int, int] | None, config: JobConfig,
           say: Progress) -> list[WorkerStatus]:
    import ray

    started = time.monotonic()
    first: int | None = None
    while True:
        statuses: list[WorkerStatus] = ray.get([
            h.run.remote(stop, config.progress_every_s) for h in handles])
        done = {p: o for s in statuses for p, o in s.offsets.items()}
        total = sum(done.values())
        first = total if first is None else first
        elapsed = time.monotonic() - started
        rate = (total - first) / elapsed if elapsed > 0 else 0.0
        target = stop or {p: max(o, done.get(p, 0)) for p, o in done.items()}
        left = sum(max(0, o - done.get(p, 0)) for p, o in target.items())
        eta = f"{left / rate:.0f} s" if rate > 0 and left else "-"
        say(f"offsets {done} of {target}; {sum(s.items for s in statuses)} live item(s); "
            f"{rate:.0f} records/s; eta {eta}; devices {[s.device for s in statuses]}")
        if stop is not None and left == 0:
            return statuses
        if config.max_s is not None and elapsed >= config.max_s:
            return statuses
