"""``memstack ingest otel``: OpenTelemetry GenAI spans and logs from Kafka -> memstack events.

An OpenTelemetry Collector's Kafka exporter (``encoding: otlp_json``) writes one OTLP JSON
request per record to a topic; this job reads it with a consumer group, turns each *new* turn,
tool call and tool result into a memstack event (``memstack.pipelines.otel``: the history every
model call repeats is dropped) and produces them with ``MemoryClient`` (idempotent, ``acks=all``,
sealed unless ``MEMSTACK_SEAL=0``). A record that is not OTLP JSON, has no tenant, or whose
GenAI attributes do not parse goes whole to ``<prefix>.dlq`` with the reason. The group's
offsets are committed once a poll's events and dead letters are acknowledged.

The topic holds conversation text in plaintext, outside crypto-shredding: memstack creates it
(when missing) with a short retention, ``retention.ms`` = 1 hour by default (docs/otel.md,
docs/forget.md).
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass, field
from types import FrameType, MappingProxyType
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from memstack.client import MemoryClient, PendingEmit, open_producer
from memstack.foundation.kafka_connect import client_options
from memstack.foundation.settings import Settings
from memstack.infra.topics import TopicSpec, apply_topic_specs, describe_topics
from memstack.pipelines import dlq
from memstack.pipelines.contracts import DeadLetter
from memstack.pipelines.otel.otlp import OtlpRecordError, decode, signals
from memstack.pipelines.otel.turns import TurnLog
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event

log = logging.getLogger(__name__)

DEFAULT_RETENTION_MS = 3_600_000
"""One hour: long enough to ride out a restart of this job, short enough that the plaintext
conversation does not outlive it by much."""


@dataclass(frozen=True)
class IngestOptions:
    topic: str
    tenant: str | None = None
    group: str | None = None
    until_caught_up: bool = False
    retention_ms: int = DEFAULT_RETENTION_MS
    partitions: int | None = None

    def group_id(self, settings: Settings) -> str:
        return self.group or f"{settings.topic_prefix}-ingest-otel"


@dataclass
class IngestStats:
    records: int = 0
    signals: int = 0
    events: int = 0
    repeated: int = 0
    dead_letters: int = 0
    skipped: int = 0
    """Records without GenAI content (other spans, metrics)."""
    kinds: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"records": self.records, "signals": self.signals, "events": self.events,
                "repeated_turns": self.repeated, "dead_letters": self.dead_letters,
                "skipped_records": self.skipped, "events_by_kind": dict(sorted(
                    self.kinds.items()))}


def ensure_otel_topic(settings: Settings, options: IngestOptions) -> None:
    """Create the topic with a short retention when missing; warn when an existing one keeps
    data longer (memstack does not alter topics it did not create)."""
    info, = describe_topics(settings.bootstrap, [options.topic])
    if not info.exists:
        spec = TopicSpec(options.topic, options.partitions or settings.partitions,
                         MappingProxyType({"retention.ms": str(options.retention_ms),
                                           "cleanup.policy": "delete"}),
                         "OTLP JSON from an OpenTelemetry Collector: plaintext, short-lived")
        apply_topic_specs(settings.bootstrap, [spec])
        return
    kept = int(info.configs.get("retention.ms", "604800000"))  # the broker's default: 7 days
    if kept < 0 or kept > options.retention_ms:
        log.warning("topic %s keeps records %s: it holds conversations in plaintext, outside "
                    "crypto-shredding; set a short retention (e.g. kafka-configs --alter "
                    "--add-config retention.ms=%d)", options.topic,
                    "forever" if kept < 0 else f"{kept / 3_600_000:.1f} h",
                    options.retention_ms)


class OtelIngest:
    """The consumer loop; :meth:`run` until stopped or caught up."""

    def __init__(self, settings: Settings, options: IngestOptions) -> None:
        self.settings = settings
        self.options = options
        self.stats = IngestStats()
        self.turns = TurnLog()
        self._stop = False
        self._client = MemoryClient(options.tenant or "_otel", "otel", settings=settings,
                                    source="otel")
        self._dead = open_producer(settings, {})
        self._consumer = KafkaConsumer(
            options.topic, **client_options(settings.bootstrap, settings.kafka_security),
            group_id=options.group_id(settings), enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=1500,
            max_poll_records=500)

    def stop(self, *_: object) -> None:
        self._stop = True

    def run(self) -> IngestStats:
        stop_at = self._end_offsets() if self.options.until_caught_up else None
        try:
            while not self._stop:
                polled = self._consumer.poll(timeout_ms=500)
                self._handle([m for batch in polled.values() for m in batch])
                if stop_at is not None and self._caught_up(stop_at):
                    break
        finally:
            self.close()
        return self.stats

    def _handle(self, messages: list[Any]) -> None:
        pending: list[PendingEmit] = []
        dead: list[Any] = []
        for message in messages:
            self.stats.records += 1
            try:
                events = self._events_of(message.value)
            except (OtlpRecordError, InvalidEventError) as exc:
                dead.append(self._dead_letter(message, exc))
                continue
            if events:
                pending.extend(self._client.emit_many(events))
        for emitted in pending:
            emitted.get()
        for future in dead:
            future.get(timeout=30)
        if messages:
            self._consumer.commit()

    def _events_of(self, value: bytes | None) -> list[Event]:
        found = signals(decode(value), self.options.tenant)
        if not found:
            self.stats.skipped += 1
            return []
        if any(item.origin.tenant is None for item in found):
            raise OtlpRecordError("resource.attributes.memstack.tenant", "no tenant: run with "
                                  "--tenant, or set the resource attribute memstack.tenant",
                                  "no_tenant")
        events: list[Event] = []
        for item in found:
            before = self.turns.repeated
            events.extend(self.turns.events(item, item.origin.tenant or ""))
            self.stats.repeated += self.turns.repeated - before
        self.stats.signals += len(found)
        self.stats.events += len(events)
        for event in events:
            kind = str(event.kind)
            self.stats.kinds[kind] = self.stats.kinds.get(kind, 0) + 1
        return events

    def _dead_letter(self, message: Any, exc: OtlpRecordError | InvalidEventError) -> Any:
        self.stats.dead_letters += 1
        log.warning("dead letter %s:%d@%d: %s", message.topic, message.partition,
                    message.offset, exc)
        record = dlq.encode(DeadLetter(message.topic, message.partition, message.offset,
                                       message.key, message.value, exc.rule, exc.field))
        return self._dead.send(self.settings.dlq_topic, key=record.key, value=record.value,
                               headers=record.headers)

    def _end_offsets(self) -> dict[TopicPartition, int]:
        from memstack.pipelines.log_reader import partitions_of

        tps = [TopicPartition(self.options.topic, p)
               for p in partitions_of(self._consumer, self.options.topic)]
        return {tp: int(end) for tp, end in self._consumer.end_offsets(tps).items()}

    def _caught_up(self, stop_at: dict[TopicPartition, int]) -> bool:
        assigned = self._consumer.assignment()
        if not assigned:
            return False
        return all(self._consumer.position(tp) >= end for tp, end in stop_at.items()
                   if tp in assigned) and assigned >= {tp for tp, end in stop_at.items()
                                                       if end > 0}

    def close(self) -> None:
        self._client.close()
        self._dead.flush(timeout=30)
        self._dead.close(timeout=30)
        self._consumer.close()


def run_ingest(settings: Settings, options: IngestOptions) -> IngestStats:
    from memstack.infra.preflight import require_topics

    require_topics(settings.bootstrap, [settings.events_topic, settings.dlq_topic])
    ensure_otel_topic(settings, options)
    job = OtelIngest(settings, options)

    def stop(signum: int, frame: FrameType | None) -> None:
        job.stop()

    previous = signal.signal(signal.SIGTERM, stop)
    started = time.monotonic()
    try:
        stats = job.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    log.info("ingest otel: %d records -> %d events (%d repeated turns dropped, %d dead "
             "letters) in %.1f s", stats.records, stats.events, stats.repeated,
             stats.dead_letters, time.monotonic() - started)
    return stats
