"""One consolidation run the fault suite can kill.

``python -m memstack.jobs.eval.faults.consolidate CHECKPOINTS STOP`` starts a small local Ray
and one consolidation actor over every partition of the feed, runs it to the offsets ``STOP``
(``p:o,p:o``) exactly, in window-aligned steps with a checkpoint after each, and prints its
status as one JSON line (offsets, items, weight digests). Killed (the actor, or the whole Ray
runtime), a rerun with the same arguments resumes from the checkpoints and must end with the
digests of an uninterrupted run.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from memstack.foundation.settings import Settings
from memstack.infra.ray import RayConfig, start_ray, stop_ray

CHECKPOINT_EVERY = 8


def parse_offsets(text: str) -> dict[int, int]:
    return {int(p): int(o) for p, o in (part.split(":") for part in text.split(",") if part)}


def steps(stop: dict[int, int], size: int) -> list[dict[int, int]]:
    """Window-aligned stops up to ``stop`` (the same for every run to ``stop``, so a resumed
    run applies the same windows as an uninterrupted one), ``stop`` last."""
    top = max(stop.values(), default=0)
    out = [{p: min(o, k) for p, o in stop.items()} for k in range(size, top, size)]
    return [*out, dict(stop)]


def main(argv: list[str]) -> int:
    import ray

    from memstack.pipelines.consolidation.actor import WorkerConfig, actor_class
    from memstack.pipelines.consolidation.job import JobConfig, job_centre
    from memstack.pipelines.consolidation.producer import ensure_feed_topic

    root, stop = Path(argv[0]), parse_offsets(argv[1])
    settings = Settings.from_env()
    topic = ensure_feed_topic(settings)
    centre = job_centre(settings)
    config = JobConfig(dim=256, window=64)
    start_ray(replace(RayConfig.from_settings(settings), address=None, num_cpus=1, num_gpus=0))
    try:
        worker = WorkerConfig(settings.bootstrap, topic, tuple(sorted(stop)), root,
                              config.learner_config(), centre, "cpu", config.window,
                              CHECKPOINT_EVERY, 3)
        actor = actor_class(0.0).remote(worker)
        for step in steps(stop, config.window * 2):  # a checkpoint at every step
            ray.get(actor.run_to.remote(step))
            ray.get(actor.checkpoint.remote())
        status = ray.get(actor.status.remote())
        print(json.dumps({"offsets": {str(k): v for k, v in status.offsets.items()},
                          "items": status.items, "digests": status.digests}), flush=True)
        return 0
    finally:
        stop_ray()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
