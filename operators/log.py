"""Positions in the log, and transaction time derived from them.

Transaction time comes from the log, never from an operator's clock: the broker's append time
(``LogAppendTime``) with the partition and offset as tie-break. A replay therefore computes the
same rows as the live pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memstack.schemas.events import Event


@dataclass(frozen=True, order=True)
class LogPosition:
    """Where an event sits in ``memstack.events``; orders events in transaction time.

    Ordering is by ``(log_time, partition, offset)``: broker append time first, the position as
    a deterministic tie-break between partitions that share a millisecond.
    """

    log_time: datetime
    partition: int
    offset: int


@dataclass(frozen=True)
class LoggedEvent:
    """An event as read back from the log: the event and where the log put it."""

    event: Event
    position: LogPosition

    @property
    def tt(self) -> LogPosition:
        """Transaction time of this event (its log position)."""
        return self.position
