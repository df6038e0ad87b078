"""Bounded reads of a Kafka topic: from a start point up to the end offsets seen at start.

Used by replays, the forget ledger, the demo and tests. Reads with manual partition assignment
(no consumer group), so a read never disturbs the live pipeline's committed positions.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import AuthorizationError

from memstack.foundation.errors import KafkaAuthorizationError, MemstackError
from memstack.foundation.kafka_connect import client_options, explain
from memstack.foundation.log_coordinates import LogPosition
from memstack.foundation.log_coordinates import LogRecord as LogRecord

log = logging.getLogger(__name__)


class TopicMissingError(MemstackError):
    """The topic does not exist. Create topics with `memstack infra up`."""


def open_consumer(bootstrap: str, **overrides: object) -> KafkaConsumer:
    config: dict[str, object] = {
        **client_options(bootstrap),
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
        return _end_offsets(consumer, topic)
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
        stops = dict(stop) if stop is not None else _end_offsets(consumer, topic)
        yield from _read(consumer, topic, partitions_of(consumer, topic), start or {}, stops,
                         poll_timeout_ms)
    except AuthorizationError as exc:  # an ACL denies this principal the read
        raise KafkaAuthorizationError(explain(exc)) from exc
    finally:
        consumer.close()


KEPT_IDLE_S = 300.0
"""A :class:`KeptReader` unused this long opens a new consumer instead of reusing its own."""


class KeptReader:
    """Bounded reads of one topic on one consumer kept open between reads.

    :func:`read_bounded` and :func:`end_offsets` open a consumer per call (about 0.13 s each
    on a local broker, measured): fine for one read, not for a reader that asks "what is new?"
    many times (the forget lineage, three times per request). Here that question is one round
    trip. Not thread-safe: one caller at a time. A failed call closes the consumer, and so
    does a call after :data:`KEPT_IDLE_S` unused (the broker drops idle connections after ten
    minutes); the next call opens a new one.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self._consumer: KafkaConsumer | None = None
        self._closer: weakref.finalize[Any, KeptReader] | None = None
        self._used = 0.0

    def end_offsets(self) -> dict[int, int]:
        """The current end offset (next offset to be written) of each partition."""
        with self._failing_closes() as consumer:
            return _end_offsets(consumer, self.topic)

    def read(self, start: Mapping[int, int], stop: Mapping[int, int],
             poll_timeout_ms: int = 500) -> Iterator[LogRecord]:
        """Records with ``start[p] <= offset < stop[p]`` (start defaults to 0) of the
        partitions in ``stop``; order is per partition. Consume it whole before the next
        call."""
        with self._failing_closes() as consumer:
            yield from _read(consumer, self.topic, sorted(stop), start, stop, poll_timeout_ms)

    def close(self) -> None:
        if self._closer is not None:
            self._closer()
        self._consumer, self._closer = None, None

    @contextmanager
    def _failing_closes(self) -> Iterator[KafkaConsumer]:
        if time.monotonic() - self._used > KEPT_IDLE_S:
            self.close()
        self._used = time.monotonic()
        if self._consumer is None:
            self._consumer = open_consumer(self.bootstrap)
            self._closer = weakref.finalize(self, self._consumer.close)
        try:
            yield self._consumer
        except BaseException:
            self.close()
            raise


def _end_offsets(consumer: KafkaConsumer, topic: str) -> dict[int, int]:
    tps = [TopicPartition(topic, p) for p in partitions_of(consumer, topic)]
    return {tp.partition: off for tp, off in consumer.end_offsets(tps).items()}


def _read(consumer: KafkaConsumer, topic: str, partitions: list[int], start: Mapping[int, int],
          stop: Mapping[int, int], poll_timeout_ms: int) -> Iterator[LogRecord]:
    """The records of ``partitions`` with ``start[p] <= offset < stop[p]`` (start defaults to
    0, stop to nothing), on ``consumer``: assigned, sought, drained."""
    live = [TopicPartition(topic, p) for p in partitions if start.get(p, 0) < stop.get(p, 0)]
    consumer.assign(live)
    if live:
        consumer.resume(*live)  # a kept consumer paused it when an earlier read reached its stop
    for tp in live:
        consumer.seek(tp, start.get(tp.partition, 0))
    yield from _drain(consumer, live, stop, poll_timeout_ms)


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
