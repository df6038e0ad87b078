"""``memstack consolidate``: the consolidation job (Ray actors over the feed), and its backfill.

``main`` binds settings, the job config and a runtime: ``--backfill`` first feeds the current
fact versions of the live stores into ``<prefix>.consolidation`` (so the job can run without the
live pipeline having fed them), then the actors run until caught up or forever.
"""

from __future__ import annotations

import logging
import sys

from memstack.foundation.settings import Settings
from memstack.infra.ray import RayConfig
from memstack.pipelines.consolidation.actor import WorkerStatus
from memstack.pipelines.consolidation.job import JobConfig, run_job

log = logging.getLogger(__name__)


def backfill(settings: Settings) -> int:
    """Feed the live stores' current fact versions; return the number of items produced."""
    from memstack.pipelines.consolidation.distill import Distiller, StoreTeacher
    from memstack.pipelines.consolidation.feed import Sharding
    from memstack.pipelines.consolidation.producer import (
        FeedProducer,
        ensure_feed_topic,
        feed_from_stores,
    )
    from memstack.pipelines.embedding import shared_encoder
    from memstack.pipelines.stores.bundle import Stores, stores_dir

    topic = ensure_feed_topic(settings)
    with Stores.open(stores_dir(settings), read_only=True) as stores:
        teacher = StoreTeacher(stores.events, shared_encoder())
        producer = FeedProducer(settings.bootstrap, topic, Distiller(teacher),
                                Sharding.from_env())
        try:
            return feed_from_stores(stores, producer).items
        finally:
            producer.close()


def main(settings: Settings, config: JobConfig, *, with_backfill: bool = False,
         ray_address: str | None = None) -> int:
    if with_backfill:
        n = backfill(settings)
        print(f"backfill: {n} current fact version(s) fed", file=sys.stderr)
    ray = RayConfig.from_settings(settings)
    if ray_address is not None:
        ray = ray.joining(ray_address, settings)
    statuses: list[WorkerStatus] = run_job(settings, config, ray_config=ray,
                                           progress=lambda line: print(line, file=sys.stderr))
    for s in statuses:
        where = f" on node {s.node[:12]}" if s.node else ""
        print(f"{s.group}: device {s.device}{where}, offsets {s.offsets}, {s.items} live item(s), "
              f"{s.applied} applied, {s.skipped} skipped, {s.bad} bad, "
              f"{len(s.digests)} learner(s)")
    return 0
