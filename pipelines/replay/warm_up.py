"""Warm a process up for replay jobs: the SQL planner and the Kafka connector's classes, the
session cluster's first job, Beam's loopback worker, and the model.

The first replay job in a Python process pays all of these besides the gateway JVM and the
cluster's start (13-16 s measured on 2 cores before any record is read, all together); a
later one in the same process reuses them. The warm replay service
(:mod:`memstack.jobs.replay_service`) calls :func:`warm_up` once at its start, after starting
its :class:`~memstack.pipelines.replay.session_cluster.SessionCluster`: it replays the
first records of the log into scratch stores (see :func:`warm_up`), then loads one encoder
per parallel prepare stage into :mod:`~memstack.pipelines.replay.encoder_pool`. Measured on
2 cores: a first job after a warm-up over an empty range started in 4.6 s, later ones in
3.4-3.6 s.
"""

from __future__ import annotations

import logging
import shutil
import time

from memstack.foundation.settings import Settings
from memstack.pipelines.replay import encoder_pool
from memstack.pipelines.replay.bounds import AtOffsets, Bounds, Earliest, End, resolve
from memstack.pipelines.replay.flink_env import process_state_kept
from memstack.pipelines.replay.job import ReplaySpec, build_job, run_replay, writer_config
from memstack.pipelines.replay.session_cluster import SessionCluster
from memstack.pipelines.replay.wiring import WriterConfig

log = logging.getLogger(__name__)


WARM_UP_RECORDS = 256
"""Records of the log replayed by the warm-up (into scratch stores, deleted after)."""


def warm_up(settings: Settings, session: SessionCluster, parallelism: int) -> float:
    """Warm ``session`` and this process up; the seconds it took. The process's environment
    and root logger are left as they were (``process_state_kept``).

    The first :data:`WARM_UP_RECORDS` records of the log are replayed into scratch stores
    (forgotten ones left out, as in any replay), which are deleted after: the job runs the
    whole path once (reading, opening sealed records, embedding, committing, building the
    indexes). An empty log gets the topology over an empty range instead."""
    began = time.perf_counter()
    scratch = session.work_dir / "warm-up-stores"
    shutil.rmtree(scratch, ignore_errors=True)
    whole = resolve(settings.bootstrap, settings.events_topic, Earliest(), End())
    per = max(1, WARM_UP_RECORDS // max(1, len(whole.partitions)))
    first = {p: min(whole.stop[p], whole.start.get(p, 0) + per) for p in whole.partitions}
    spec = ReplaySpec(into=scratch, start=Earliest(), stop=AtOffsets(first),
                      parallelism=parallelism, session=session)
    config = writer_config(spec, settings)
    try:
        if Bounds(whole.topic, whole.start, first).total() > 0:
            run_replay(spec, settings)
        else:
            _empty_job(settings, session, parallelism, config)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    encoder_pool.preload(config.encoder, config.embed_threads, count=parallelism)
    seconds = time.perf_counter() - began
    log.info("replay warm-up: planner, session cluster, loopback workers and %d encoder(s) "
             "(%s, %d threads) ready in %.1f s", parallelism, config.encoder,
             config.embed_threads, seconds)
    return seconds


def _empty_job(settings: Settings, session: SessionCluster, parallelism: int,
               config: WriterConfig) -> None:
    """The replay's topology over every partition's end to its end: nothing read or written."""
    bounds = resolve(settings.bootstrap, settings.events_topic, End(), End())
    with process_state_kept():
        lines = list(build_job(session.runtime(parallelism), settings, bounds, config))
    if lines:  # an empty range applies nothing; a line means something was written
        raise RuntimeError(f"the warm-up job over an empty range reported {lines[-1]}")
