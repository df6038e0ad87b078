"""Builders for the store and projector tests: real events, real operators, log positions.

``tt=k`` puts an event at log time ``T0 + k s``, offset ``k`` of the given partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.operators.log import LoggedEvent, LogPosition
from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import MemoryRow, Mutation, PutMemory
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.stores.base import Vectors
from memstack.schemas.events import Event

T0 = datetime(2025, 1, 1, tzinfo=UTC)
TOPIC = "test.events"
LOG_APPEND_TIME = 1


def at(tt: int) -> datetime:
    return T0 + timedelta(seconds=tt)


def year(y: int) -> datetime:
    return datetime(y, 1, 1, tzinfo=UTC)


def builder(tenant: str = "acme") -> EventBuilder:
    return EventBuilder(Defaults(tenant=tenant, agent="helper", source="test"))


def logged(event: Event, tt: int, partition: int = 0) -> LoggedEvent:
    return LoggedEvent(event, LogPosition(at(tt), partition, tt))


def record(event: Event | bytes, tt: int, partition: int = 0) -> LogRecord:
    """The log record of an event (or of raw bytes) at position ``tt``."""
    value = event if isinstance(event, bytes) else event.to_json()
    key = None if isinstance(event, bytes) else event.key
    return LogRecord(TOPIC, key, value, LogPosition(at(tt), partition, tt), LOG_APPEND_TIME)


def mutations(events: Sequence[LoggedEvent], operator: MemoryOperator | None = None) -> (
    list[Mutation]
):
    """What the real memory operator emits for ``events``."""
    return (operator or MemoryOperator()).apply_batch(events)


def memories(muts: Sequence[Mutation]) -> list[MemoryRow]:
    return [m.row for m in muts if isinstance(m, PutMemory)]


def unit_vectors(n: int, dim: int = 384, seed: int = 0) -> Vectors:
    """Seeded random unit vectors (test data for the vector store, not an encoder)."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dim)).astype(np.float32)
    out: Vectors = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def conversation(b: EventBuilder, session: str, n: int, start: int = 0) -> list[LoggedEvent]:
    """``n`` messages in one session at tt = start .. start+n-1."""
    return [logged(b.message(session, "user", f"message {i} about topic {i % 7}",
                             occurred_at=at(start + i)), start + i) for i in range(n)]
