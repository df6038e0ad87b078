"""The consolidation job: Ray actors over the feed partitions, until caught up or forever.

``run_job`` starts (or joins, with ``MEMSTACK_RAY_ADDRESS`` or ``--ray``) Ray, splits the feed
partitions over the actors, spread over the cluster's nodes (``SPREAD``), and drives them in
rounds of ``progress_every_s``, logging per-partition offsets against the end offsets, the rate
and an ETA. Each round ends with a checkpoint per actor; an actor lost with its node (or killed)
is created again, loads its group's latest checkpoint and goes on from there, up to
``actor_restarts`` times per job. Checkpoints go under
``<MEMSTACK_HOME>/consolidation/checkpoints/<group>/``; the centring vector of new learners is
computed once from the encoder and kept in ``<MEMSTACK_HOME>/consolidation/centre.pt``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from memstack.foundation.settings import Settings
from memstack.infra.ray import RayConfig, gpu_available, start_ray, stop_ray
from memstack.operators.consolidation import FeatureConfig, LearnerConfig
from memstack.operators.consolidation.errors import ConsolidationJobError
from memstack.pipelines.consolidation.actor import (
    WorkerConfig,
    WorkerStatus,
    actor_class,
    assign_partitions,
)
from memstack.pipelines.consolidation.producer import ensure_feed_topic
from memstack.pipelines.log_reader import end_offsets

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
    actor_restarts: int = 3
    """Actors lost (a node died) that are created again before the job gives up."""

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
            progress: Progress | None = None,
            ray_config: RayConfig | None = None) -> list[WorkerStatus]:
    """Run the actors; return their final status (after a last checkpoint)."""
    say = progress or (lambda line: log.info("%s", line))
    topic = ensure_feed_topic(settings)
    centre = job_centre(settings) if centre is None else centre
    start_ray(ray_config or RayConfig.from_settings(settings))
    fleet = _Fleet([])
    try:
        ends = end_offsets(settings.bootstrap, topic)
        groups = assign_partitions(sorted(ends), config.actors)
        gpu = gpu_available()
        fleet = _Fleet([WorkerConfig(settings.bootstrap, topic, group, checkpoint_root(settings),
                                     config.learner_config(), centre, "cuda" if gpu else "cpu",
                                     config.window, config.checkpoint_every, config.keep)
                        for group in groups], gpu=gpu, restarts=config.actor_restarts)
        say(f"consolidating {topic}: {len(fleet.handles)} actor(s) over partitions {groups}, "
            f"end offsets {ends}")
        return _drive(fleet, ends if config.until_caught_up else None, config, say)
    finally:
        fleet.kill()
        stop_ray()


REPLACE_PAUSE_S = 2.0
"""Pause before creating a lost actor's replacement again."""


class _Fleet:
    """The job's actors, one per partition group, spread over the nodes; an actor lost with
    its node is created again from its config (it resumes from its latest checkpoint)."""

    def __init__(self, workers: list[WorkerConfig], *, gpu: bool = False,
                 restarts: int = 0) -> None:
        self.workers = workers
        self.gpu = gpu
        self.restarts_left = restarts
        self.handles: list[Any] = [self._create(w) for w in workers]

    def _create(self, worker: WorkerConfig) -> Any:
        return actor_class(1.0 if self.gpu else 0.0).options(
            scheduling_strategy="SPREAD").remote(worker)

    def round(self, stop: dict[int, int] | None, seconds: float,
              say: Progress) -> list[WorkerStatus]:
        """One round: every actor runs ``seconds`` (and checkpoints); lost ones are replaced."""
        import ray
        from ray.exceptions import RayActorError

        refs = [h.run.remote(stop, seconds) for h in self.handles]
        statuses: list[WorkerStatus] = []
        for n, ref in enumerate(refs):
            try:
                statuses.append(ray.get(ref))
            except RayActorError as exc:
                statuses.append(self._replace(n, exc, say))
        return statuses

    def _replace(self, n: int, exc: Exception, say: Progress) -> WorkerStatus:
        """Create the lost actor again from its checkpoint. A replacement can itself be lost
        (placed on the dying node before Ray marked it dead): that uses another restart."""
        import ray
        from ray.exceptions import RayActorError

        group = self.workers[n].group
        while True:
            if self.restarts_left <= 0:
                raise ConsolidationJobError(
                    f"the actor of feed partitions {group} was lost again ({exc}) and the "
                    "job's actor restarts are used up; its checkpoints are kept: run "
                    "`memstack consolidate` again once the cluster is healthy") from exc
            self.restarts_left -= 1
            say(f"actor {group} lost ({type(exc).__name__}: its node died or it was killed); "
                "creating it again from its latest checkpoint")
            self.handles[n] = self._create(self.workers[n])
            try:
                status: WorkerStatus = ray.get(self.handles[n].status.remote())
            except RayActorError as again:
                exc = again
                time.sleep(REPLACE_PAUSE_S)  # let Ray mark the dead node before the next try
                continue
            say(f"actor {group} resumed at offsets {status.offsets} on node {status.node[:12]}")
            return status

    def kill(self) -> None:
        import ray

        for handle in self.handles:
            with contextlib.suppress(Exception):  # already gone with its node
                ray.kill(handle)


def _drive(fleet: _Fleet, stop: dict[int, int] | None, config: JobConfig,
           say: Progress) -> list[WorkerStatus]:
    started = time.monotonic()
    first: int | None = None
    while True:
        statuses = fleet.round(stop, config.progress_every_s, say)
        done = {p: o for s in statuses for p, o in s.offsets.items()}
        total = sum(done.values())
        first = total if first is None else first
        elapsed = time.monotonic() - started
        rate = (total - first) / elapsed if elapsed > 0 else 0.0
        target = stop or {p: max(o, done.get(p, 0)) for p, o in done.items()}
        left = sum(max(0, o - done.get(p, 0)) for p, o in target.items())
        eta = f"{left / rate:.0f} s" if rate > 0 and left else "-"
        nodes = len({s.node for s in statuses})
        say(f"offsets {done} of {target}; {sum(s.items for s in statuses)} live item(s); "
            f"{rate:.0f} records/s; eta {eta}; devices {[s.device for s in statuses]}; "
            f"{nodes} node(s)")
        if stop is not None and left == 0:
            return statuses
        if config.max_s is not None and elapsed >= config.max_s:
            return statuses
