"""Contracts between the engine bindings (Faust live, PyFlink replay, simple rebuild) and the
projector that turns raw log records into store writes.

An engine reads records from ``memstack.events`` and hands them to a :class:`Projector` in
batches:

1. ``plan = projector.prepare(records)`` parses and validates every record, drops records whose
   offset the stores already applied, runs the pure operators and returns the mutations plus the
   dead letters (records that failed validation, with the reason and the original bytes);
2. the engine sends ``plan.dead_letters`` to ``memstack.dlq`` and waits for the acknowledgement;
3. ``projector.commit(plan)`` writes the mutations and the next offset of every partition in the
   batch: DuckDB rows and offsets in one transaction, LanceDB rows merged by id. A crash between
   any two steps loses nothing and duplicates nothing: the records are read again, already
   applied offsets are skipped, and every write is keyed.

The single-store projector's commit is :class:`~memstack.pipelines.commit_path.CommitPath`, its
steps numbered in order there (vectors, session state, stores, offsets, consolidation feed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from memstack.operators.log import LoggedEvent
from memstack.operators.mutations import Mutation
from memstack.pipelines.log_reader import LogRecord
from memstack.schemas.events import Event

if TYPE_CHECKING:  # numpy is a server dependency: the CLI's parser imports this module
    import numpy as np
    import numpy.typing as npt


@dataclass(frozen=True)
class DeadLetter:
    """A record that failed validation: where it was, why, and its original bytes."""

    source_topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    field: str


@dataclass(frozen=True)
class Plan:
    """What one batch will write: mutations and the offsets to store with them."""

    events: list[LoggedEvent]
    mutations: list[Mutation]
    dead_letters: list[DeadLetter]
    next_offsets: dict[int, int] = field(default_factory=dict)
    """Per partition, the offset after the last record of the batch (applied or dead)."""
    vectors: Mapping[str, npt.NDArray[np.float32]] = field(default_factory=dict)
    """Embeddings by text, each text encoded once per batch (the commit path's vectors step;
    a replay's parallel stage may hand some in): the session state and the stores add the
    same vectors."""


class Projector(Protocol):
    """Engine-agnostic: parse, run operators, write idempotently with offsets."""

    def applied_offsets(self) -> dict[int, int]:
        """Per partition, the next offset the stores expect (0 when nothing was applied)."""
        ...

    def prepare(self, records: list[LogRecord]) -> Plan: ...

    def commit(self, plan: Plan) -> None: ...

    def close(self) -> None: ...


class ForgetFilter(Protocol):
    """The forget ledger as projectors see it: events it covers are never applied."""

    def covers(self, event: Event, log_time: datetime | None = None) -> bool:
        """True when a forget request erases ``event`` logged at ``log_time`` (requests cover
        their scope's events logged up to the request; later events are new data)."""
        ...
