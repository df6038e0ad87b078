"""Where a replay starts and stops: parsed from the command line, resolved against the log.

A point is ``earliest``, ``end`` (the end offsets at the moment of resolution), a time
(ISO 8601 with a zone; the first record whose log append time is at or after it) or explicit
offsets ``P:O,P:O`` (partitions not named take the default of the side: earliest for a start,
the end for a stop). Resolution turns every point into explicit per-partition offsets, so the
job's source is bounded by numbers captured once, when the replay starts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from kafka import KafkaConsumer, TopicPartition

from memstack.pipelines.log_reader import open_consumer, partitions_of
from memstack.pipelines.replay.errors import BadPointError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Earliest:
    """The first offset still in the log."""


@dataclass(frozen=True)
class End:
    """The end offsets (next offset to be written) when the replay starts."""


@dataclass(frozen=True)
class AtTime:
    """The first record whose log append time (transaction time) is at or after ``at``."""

    at: datetime


@dataclass(frozen=True)
class AtOffsets:
    """Explicit offsets per partition."""

    offsets: Mapping[int, int] = field(default_factory=dict)


Point = Earliest | End | AtTime | AtOffsets


def parse_point(text: str) -> Point:
    """``earliest`` | ``end`` | ``2026-03-02T09:00:00Z`` | ``0:42,1:300``."""
    value = text.strip()
    if value in ("earliest", "beginning"):
        return Earliest()
    if value in ("end", "latest", "now"):
        return End()
    if ":" in value and "T" not in value and "-" not in value:
        return AtOffsets(MappingProxyType(_parse_offsets(value)))
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise BadPointError(
            f"{text!r} is not a replay point; use earliest, end, an ISO time with a zone "
            "(2026-03-02T09:00:00Z) or offsets P:O,P:O (0:42,1:300)"
        ) from exc
    if at.utcoffset() is None:
        raise BadPointError(f"time {text!r} has no zone; add Z or +00:00")
    return AtTime(at)


def _parse_offsets(value: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for part in value.split(","):
        try:
            p, o = (int(x) for x in part.split(":"))
        except ValueError as exc:
            raise BadPointError(f"{part!r} is not PARTITION:OFFSET (e.g. 0:42)") from exc
        if p < 0 or o < 0:
            raise BadPointError(f"{part!r}: partition and offset must be >= 0")
        out[p] = o
    return out


@dataclass(frozen=True)
class Bounds:
    """Per partition, replay ``start[p] <= offset < stop[p]``."""

    topic: str
    start: Mapping[int, int]
    stop: Mapping[int, int]

    @property
    def partitions(self) -> list[int]:
        return sorted(self.stop)

    def total(self) -> int:
        """Offsets in range (an upper bound of the records: control records take offsets too)."""
        return sum(max(0, self.stop[p] - self.start.get(p, 0)) for p in self.stop)

    def after(self, applied: Mapping[int, int]) -> Bounds:
        """These bounds with each start raised to what the stores already applied."""
        start = {p: max(self.start.get(p, 0), applied.get(p, 0)) for p in self.stop}
        start = {p: min(o, self.stop[p]) for p, o in start.items()}
        return Bounds(self.topic, MappingProxyType(start), self.stop)


def resolve(bootstrap: str, topic: str, start: Point, stop: Point) -> Bounds:
    """Turn two points into explicit offsets, reading the log's current begin and end once."""
    consumer = open_consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in partitions_of(consumer, topic)]
        begin = {tp.partition: o for tp, o in consumer.beginning_offsets(tps).items()}
        end = {tp.partition: o for tp, o in consumer.end_offsets(tps).items()}
        lo = _offsets(consumer, topic, start, begin, end, missing=begin)
        hi = _offsets(consumer, topic, stop, begin, end, missing=end)
    finally:
        consumer.close()
    hi = {p: max(lo[p], hi[p]) for p in hi}
    return Bounds(topic, MappingProxyType(lo), MappingProxyType(hi))


def _offsets(consumer: KafkaConsumer, topic: str, point: Point, begin: Mapping[int, int],
             end: Mapping[int, int], *, missing: Mapping[int, int]) -> dict[int, int]:
    if isinstance(point, Earliest):
        return dict(begin)
    if isinstance(point, End):
        return dict(end)
    if isinstance(point, AtTime):
        ms = int(point.at.timestamp() * 1000)
        found = consumer.offsets_for_times({TopicPartition(topic, p): ms for p in end})
        return {tp.partition: (end[tp.partition] if hit is None else hit.offset)
                for tp, hit in found.items()}
    unknown = set(point.offsets) - set(end)
    if unknown:
        raise BadPointError(f"partitions {sorted(unknown)} do not exist in '{topic}' "
                            f"(it has {sorted(end)})")
    out = {p: point.offsets.get(p, missing[p]) for p in end}
    for p, o in out.items():
        if not begin[p] <= o <= end[p]:
            log.warning("offset %d of partition %d is outside [%d, %d]; clamped",
                        o, p, begin[p], end[p])
    return {p: min(max(o, begin[p]), end[p]) for p, o in out.items()}
