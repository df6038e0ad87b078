"""``actor_updates_per_s`` of ``bench consolidate``: the learner driven through a real Ray actor.

Batches of feed records (the wire bytes the consolidation actors consume) are sent back to back
to one actor (:class:`~memstack.pipelines.consolidation.actor.BankApplier`) that decodes them and
updates its learner bank, with the same D, batch and torch threads as the bare learner figure.
"""

from __future__ import annotations

import time

import torch

from memstack.jobs.bench.consolidate.data import Data, learner_config
from memstack.jobs.measure import Report


def actor_throughput(data: Data, dim: int, batch: int, reps: int, device: str,
                     report: Report) -> dict[str, float]:
    """Updates/s through a real Ray actor: batches of feed records (the wire bytes the actors
    consume) sent back to back to one actor that decodes them and updates its learner bank."""
    try:
        import ray

        from memstack.foundation.settings import Settings
        from memstack.infra.ray import RayConfig, gpu_available, start_ray, stop_ray
        from memstack.pipelines.consolidation.actor import applier_class
        from memstack.pipelines.consolidation.feed import FeedRecord
    except ImportError as exc:
        report("no Ray here (%s): actor_updates_per_s skipped", exc)
        return {}
    rows = torch.randint(0, data.exact.shape[0], (batch,), generator=torch.Generator())
    cues = data.exact[rows].numpy()
    targets = data.teacher.targets([data.cues[int(i)] for i in rows]).numpy()
    payloads = [[FeedRecord("write", f"a{n}.{k}", "bench", float(n), None, cues[k],
                            targets[k]).to_bytes() for k in range(batch)] for n in range(reps + 1)]
    started_here = not ray.is_initialized()
    if started_here:
        began = time.perf_counter()
        start_ray(RayConfig.from_settings(Settings.from_env()))
        report("ray started in %.1f s", time.perf_counter() - began)
    actor = None
    try:
        gpu = device == "cuda" and gpu_available()
        # the same torch threads as the bare learner here (Ray would give the actor one)
        actor = applier_class(1.0 if gpu else 0.0).remote(learner_config(dim), data.centre,
                                                          "cuda" if gpu else "cpu",
                                                          torch.get_num_threads())
        ray.get(actor.apply_raw.remote(payloads[0]))  # warm-up: actor start, first batch
        threads = int(ray.get(actor.threads.remote()))
        began = time.perf_counter()
        ray.get([actor.apply_raw.remote(p) for p in payloads[1:]])
        seconds = time.perf_counter() - began
    finally:
        if actor is not None:
            ray.kill(actor)
        if started_here:
            stop_ray()
    report("actor D=%d batch=%d: %.4f s per batch (%s, %d torch thread(s); driver %d)", dim,
           batch, seconds / reps, "cuda" if gpu else "cpu", threads, torch.get_num_threads())
    return {"actor_updates_per_s": batch * reps / seconds, "actor_device_cuda": float(gpu),
            "actor_torch_threads": float(threads),
            "bench_torch_threads": float(torch.get_num_threads())}
