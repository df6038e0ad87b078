"""Per-partition order across a parallel stage, restored exactly.

The replay's parallel stage is keyed by session, so records of one Kafka partition reach the
single writer interleaved differently than the log holds them (the order *within* a session is
kept; the order *between* sessions of a partition is not). The writer applies each partition in
log order, as the live pipeline does, so the stores' offsets only ever move forward over records
that were all applied.

Each record carries a link: the offset of the record before it in its partition, as the source
read it (``FIRST`` for the first one of the replay). Offsets have gaps (transaction markers,
aborted records), so "offset + 1" cannot tell what comes next; the link can.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

FIRST = -1
"""The link of the first record of a partition in a replay."""


@dataclass
class PartitionLinker:
    """Source side: the previous offset seen per partition (one per source subtask)."""

    last: dict[int, int] = field(default_factory=dict)

    def link(self, partition: int, offset: int) -> int:
        prev = self.last.get(partition, FIRST)
        self.last[partition] = offset
        return prev


@dataclass
class Resequencer(Generic[T]):
    """Writer side: releases each partition's records in log order, following the links."""

    _next_prev: dict[int, int] = field(default_factory=dict)
    _waiting: dict[int, dict[int, tuple[int, T]]] = field(default_factory=dict)

    def push(self, partition: int, prev: int, offset: int, item: T) -> Iterator[T]:
        """Accept one record; yield every record of its partition that is now in order."""
        waiting = self._waiting.setdefault(partition, {})
        waiting[prev] = (offset, item)
        expected = self._next_prev.get(partition, FIRST)
        while expected in waiting:
            offset, ready = waiting.pop(expected)
            expected = offset
            yield ready
        self._next_prev[partition] = expected

    def pending(self) -> int:
        """Records held back, waiting for an earlier record of their partition."""
        return sum(len(w) for w in self._waiting.values())
