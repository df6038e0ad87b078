"""Producing the consolidation feed: after each committed batch (live) or from the stores.

``FeedProducer.publish(mutations)`` is called by the live pipeline after the stores committed a
batch: it derives the feed items, distils them and produces them to ``<prefix>.consolidation``
(idempotent producer, ``acks=all``), keyed by shard; a broadcast removal goes to every
partition. It returns once the broker acknowledged every record. A crash between the stores'
commit and the publish loses that batch's items: :func:`feed_from_stores` re-emits the current
versions (the actors skip ids already live), see docs/consolidation.md. :func:`publish_committed`
is that sequence (operator, commit, publish) over logged batches, for a check or test that feeds
the learners without a live worker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kafka import KafkaProducer

from memstack.foundation.kafka_connect import client_options
from memstack.foundation.settings import Settings
from memstack.infra.topics import TopicSpec, apply_topic_specs
from memstack.operators.log import LoggedEvent
from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import FactVersion, Mutation
from memstack.pipelines.consolidation.distill import Distiller
from memstack.pipelines.consolidation.feed import (
    FeedItem,
    Sharding,
    feed_items,
    write_item,
)
from memstack.pipelines.stores import arrow
from memstack.pipelines.stores.base import EventIndex
from memstack.pipelines.stores.bundle import Stores

log = logging.getLogger(__name__)

PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "all",
    "enable_idempotence": True,
    "max_in_flight_requests_per_connection": 5,
    "linger_ms": 5,
    "max_request_size": 16 * 1024 * 1024,
}


def feed_topic(settings: Settings) -> str:
    return f"{settings.topic_prefix}.consolidation"


def feed_topic_spec(settings: Settings) -> TopicSpec:
    """The feed topic: kept forever, broker time (LogAppendTime), the events' partition count."""
    return TopicSpec(feed_topic(settings), settings.partitions,
                     MappingProxyType({"retention.ms": "-1", "retention.bytes": "-1",
                                       "cleanup.policy": "delete",
                                       "message.timestamp.type": "LogAppendTime"}),
                     "consolidation feed: learner writes and removals derived from fact versions")


def ensure_feed_topic(settings: Settings) -> str:
    apply_topic_specs(settings.bootstrap, [feed_topic_spec(settings)])
    return feed_topic(settings)


@dataclass(frozen=True)
class Published:
    """What one publish produced: records (a broadcast counts once per partition)."""

    items: int
    records: int
    writes: int
    removals: int


class FeedProducer:
    """Distils and produces feed items; call :meth:`publish` after a batch committed."""

    def __init__(self, bootstrap: str, topic: str, distiller: Distiller,
                 sharding: Sharding | None = None) -> None:
        self.topic = topic
        self.distiller = distiller
        self.sharding = sharding or Sharding()
        self._producer = KafkaProducer(**client_options(bootstrap), **PRODUCER_CONFIG)
        parts = self._producer.partitions_for(topic)
        if not parts:
            raise ValueError(f"feed topic {topic!r} has no partitions; run ensure_feed_topic")
        self._partitions = sorted(parts)

    def publish(self, mutations: Sequence[Mutation]) -> Published:
        """Feed items of a committed batch's mutations, produced and acknowledged."""
        return self.publish_items(feed_items(mutations, self.sharding))

    def publish_items(self, items: Sequence[FeedItem]) -> Published:
        if not items:
            return Published(0, 0, 0, 0)
        futures = []
        for record in self.distiller.records(items):
            value = record.to_bytes()
            if record.key is None:
                futures += [self._producer.send(self.topic, value=value, partition=p)
                            for p in self._partitions]
            else:
                futures.append(self._producer.send(self.topic, key=record.key, value=value))
        self._producer.flush()
        for future in futures:
            future.get(timeout=30)
        writes = sum(1 for i in items if i.op == "write")
        log.debug("feed: %d item(s), %d record(s)", len(items), len(futures))
        return Published(len(items), len(futures), writes, len(items) - writes)

    def close(self) -> None:
        self._producer.close(timeout=30)


def publish_committed(batches: Iterable[Sequence[LoggedEvent]], operator: MemoryOperator,
                      events: EventIndex, producer: FeedProducer) -> None:
    """What the live pipeline does after each batch: the operator's mutations, committed to
    ``events`` (no offsets), then published to the feed."""
    for batch in batches:
        mutations = operator.apply_batch(batch)
        events.apply(mutations, {}, topic="t")
        producer.publish(mutations)


def current_versions(stores: Stores) -> Iterable[FactVersion]:
    """Every current, open-ended fact version of every tenant, in transaction-time order."""
    table = stores.events.query("SELECT * FROM fact_versions WHERE tt_to IS NULL AND vt_to IS "
                  "NULL ORDER BY tt_from, tt_from_partition, tt_from_offset, version_id")
    return arrow.to_versions(table)


def feed_from_stores(stores: Stores, producer: FeedProducer, *, chunk: int = 512) -> Published:
    """Backfill: write items for the stores' current versions (the actors skip live ids)."""
    items = [write_item(v, producer.sharding) for v in current_versions(stores)]
    total = Published(0, 0, 0, 0)
    for start in range(0, len(items), chunk):
        done = producer.publish_items(items[start:start + chunk])
        total = Published(total.items + done.items, total.records + done.records,
                          total.writes + done.writes, total.removals + done.removals)
        log.info("backfill: %d of %d current version(s) fed", start + done.items, len(items))
    return total
