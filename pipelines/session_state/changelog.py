"""The session-state table's Kafka bindings: its compacted changelog topic and the sinks.

In the Faust app the changelog is a Faust table's (:func:`define_table`), so Faust recovers it
on (re)assignment; :class:`FaustTableSink` writes through that table with explicit partitions
(Faust's own ``table[key] = v`` would use the partition of "the current event", wrong for
batches that span partitions). :class:`KafkaSink` writes the same changelog with kafka-python
(tools, tests, offline forgetting). Both are a ``ChangelogSink`` and a ``SnapshotSource`` of
``memstack.pipelines.session_state.table``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka import KafkaProducer

from memstack.foundation.kafka_connect import client_options

TABLE_NAME = "session-state"
CHANGELOG_CONFIGS = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                     "segment.ms": "60000", "delete.retention.ms": "1000",
                     "max.message.bytes": "2097152"}
"""Compacted, and tombstones go fast: a dropped session's bytes leave the log (forget)."""


def changelog_topic(app_id: str, table_name: str = TABLE_NAME) -> str:
    """Faust's name for a table's changelog topic."""
    return f"{app_id}-{table_name}-changelog"


def ensure_changelog_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create the compacted changelog topic (as many partitions as the events topic)."""
    from memstack.infra.topics import TopicSpec, apply_topic_specs

    apply_topic_specs(bootstrap, [TopicSpec(topic, partitions, dict(CHANGELOG_CONFIGS),
                                            "session-state snapshots (Faust table changelog)")])


def define_table(app: Any, partitions: int, table_name: str = TABLE_NAME) -> Any:
    """Declare the Faust table (raw bytes keys/values) whose changelog holds the snapshots."""
    # key_type/value_type bytes make Faust pick the "raw" codec for the changelog (recovery
    # decodes with those, not with a schema's serializers).
    return app.Table(table_name, default=None, partitions=partitions, key_type=bytes,
                     value_type=bytes)


class FaustTableSink:
    """Writes through a Faust table: its local store and its changelog, explicit partitions."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self._pending: list[Any] = []

    def get(self, key: str) -> bytes | None:
        value = self.table.data.get(key.encode())
        return None if value is None else bytes(value)

    def send(self, partition: int, key: str, value: bytes | None) -> None:
        raw = key.encode()
        if value is None:
            self.table.data.pop(raw, None)
        else:
            self.table.data[raw] = value
        self._pending.append(self.table.send_changelog(partition, raw, value,
                                                       key_serializer="raw",
                                                       value_serializer="raw"))

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending:
            await asyncio.gather(*pending)


class KafkaSink:
    """The same changelog written with kafka-python (tools, tests, replays without Faust)."""

    def __init__(self, bootstrap: str, topic: str,
                 snapshots: dict[str, bytes] | None = None) -> None:
        self.topic = topic
        self.snapshots = snapshots if snapshots is not None else {}
        self._producer = KafkaProducer(**client_options(bootstrap), acks="all",
                                       enable_idempotence=True, max_request_size=4 << 20)
        self._pending: list[Any] = []

    def get(self, key: str) -> bytes | None:
        return self.snapshots.get(key)

    def send(self, partition: int, key: str, value: bytes | None) -> None:
        if value is None:
            self.snapshots.pop(key, None)
        else:
            self.snapshots[key] = value
        self._pending.append(self._producer.send(self.topic, key=key.encode(), value=value,
                                                 partition=partition))

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        await asyncio.get_running_loop().run_in_executor(None, _wait_all, pending)

    def close(self) -> None:
        self._producer.close()


def _wait_all(futures: list[Any]) -> None:
    for future in futures:
        future.get(timeout=30)


def latest_snapshots(bootstrap: str, topic: str) -> dict[str, bytes]:
    """The changelog's state: the latest value per key, tombstoned keys left out."""
    from memstack.pipelines.log_reader import read_bounded

    latest: dict[str, bytes | None] = {}
    for record in read_bounded(bootstrap, topic):
        if record.key is not None:
            latest[record.key.decode()] = record.value
    return {k: v for k, v in latest.items() if v is not None}
