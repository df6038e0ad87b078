"""Bounded reads of a Kafka topic: from a start point up to the end offsets seen at start.

Used by replays, the forget ledger, the demo and tests. Reads with manual partition assignment
(no consumer group), so a read never disturbs the live pipeline's committed positions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from kafka import KafkaConsumer, TopicPartition

from memstack.foundation.errors import MemstackError
from memstack.operators.log import LogPosition

log = logging.getLogger(__name__)


class TopicMissingError(MemstackError):
    """The topic does not exist. Create topics with `memstack infra up`."""


@dataclass(frozen=True)
class LogRecord:
    """One record as the log holds it: key, raw value bytes and position."""

    topic: str
    key: bytes | None
    value: bytes | None
    position: LogPosition
    timestamp_type: int


def open_consumer(bootstrap: str, **overrides: object) -> KafkaConsumer:
    config: dict[str, object] = {
        "bootstrap_servers": bootstrap,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "fetch_max_bytes": 64 * 1024 * 1024,
        "max_partition_fetch_bytes": 16 * 1024 * 1024,
        "max_poll_records": 5000,
        **overrides,
    }
    return KafkaConsumer(**config)


def partitions_of(consumer: KafkaConsumer, topic: str, timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return sorted(parts)
        time.sleep(0.1)
    raise TopicMissingError(f"topic '{topic}' not found; create topics with `memstack infra up`")


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """The current end offset (next offset to be written) of each partition."""
    consumer = open_consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in partitions_of(consumer, topic)]
        return {tp.partition: off for tp, off in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def read_bounded(
    bootstrap: str,
    topic: str,
    start: Mapping[int, int] | None = None,
    stop: Mapping[int, int] | None = None,
    *,
    poll_timeout_ms: int = 500,
) -> Iterator[LogRecord]:
    """Yield records with ``start[p] <= offset < stop[p]`` (defaults: 0 and the end now).

    Order is per partition; partitions interleave as the broker returns them.
    """
    consumer = open_consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in partitions_of(consumer, topic)]
        stops = dict(stop) if stop is not None else {
            tp.partition: off for tp, off in consumer.end_offsets(tps).items()
        }
        starts = {tp.partition: (start or {}).get(tp.partition, 0) for tp in tps}
        live = [tp for tp in tps if starts[tp.partition] < stops.get(tp.partition, 0)]
        consumer.assign(live)
        for tp in live:
            consumer.seek(tp, starts[tp.partition])
        yield from _drain(consumer, live, stops, poll_timeout_ms)
    finally:
        consumer.close()


def _drain(consumer: KafkaConsumer, live: list[TopicPartition], stops: Mapping[int, int],
           poll_timeout_ms: int) -> Iterator[LogRecord]:
    remaining = set(live)
    while remaining:
        batch = consumer.poll(timeout_ms=poll_timeout_ms)
        for tp, messages in batch.items():
            for m in messages:
                if m.offset >= stops[tp.partition]:
                    break
                yield to_record(m)
            if consumer.position(tp) >= stops[tp.partition]:
                remaining.discard(tp)
                consumer.pause(tp)
        for tp in list(remaining):  # partitions whose tail holds only aborted/control records
            if consumer.position(tp) >= stops[tp.partition]:
                remaining.discard(tp)


def to_record(m: object) -> LogRecord:
    """Convert a kafka-python ConsumerRecord (typed loosely by the library)."""
    ts = datetime.fromtimestamp(m.timestamp / 1000, UTC)  # type: ignore[attr-defined]
    pos = LogPosition(ts, m.partition, m.offset)  # type: ignore[attr-defined]
    return LogRecord(m.topic, m.key, m.value, pos, m.timestamp_type)  # type: ignore[attr-defined]
