"""Rows and store mutations: what the pure operators emit and the sinks apply.

Operators never touch a store; they return mutations. Every mutation is keyed (by event id or
version id), so a sink applies it idempotently: applying the same mutation twice, or a batch
after a crash and a re-read of the log, leaves the store as applying it once.

Times: valid time ``[vt_from, vt_to)`` with ``None`` for "open" (unbounded); transaction time
``[tt_from, tt_to)`` from the log (``LogPosition``), ``None`` for "still current".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from memstack.operators.log import LogPosition
from memstack.schemas.metadata import Metadata, metadata_json

FactOp = Literal["assert", "retract"]


@dataclass(frozen=True)
class RecordRow:
    """One immutable raw record per message, tool call, tool result, observation or note."""

    event_id: str
    tenant: str
    agent: str
    session: str
    subject: str | None
    kind: str
    occurred_at: datetime
    vt_from: datetime
    vt_to: datetime | None
    tt: datetime
    partition: int
    offset: int
    payload_json: str
    text: str | None
    source: str
    authority: str
    metadata: Metadata = field(default_factory=dict, hash=False)
    """The event's metadata (:mod:`memstack.schemas.metadata`); ``{}`` for none."""

    @property
    def metadata_json(self) -> str:
        """The stored form of :attr:`metadata`: canonical JSON text."""
        return metadata_json(self.metadata)


@dataclass(frozen=True)
class MemoryRow:
    """Text to embed and search (the sink adds the embedding). ``memory_id`` is the event id."""

    memory_id: str
    event_id: str
    tenant: str
    session: str
    subject: str | None
    kind: str
    text: str
    vt_from: datetime
    vt_to: datetime | None
    tt_from: datetime
    tt_to: datetime | None
    partition: int
    offset: int
    metadata: Metadata = field(default_factory=dict, hash=False)
    """The event's metadata (:mod:`memstack.schemas.metadata`); ``{}`` for none."""

    @property
    def metadata_json(self) -> str:
        """The stored form of :attr:`metadata`: canonical JSON text."""
        return metadata_json(self.metadata)


@dataclass(frozen=True)
class FactEntry:
    """The stored input of a fact timeline: one asserted or retracted fact, as logged.

    ``object`` is None only for a retraction that names no value. ``tt`` is the log position of
    the event, which orders entries in transaction time.
    """

    event_id: str
    tenant: str
    subject: str
    relation: str
    object: str | None
    op: FactOp
    vt_from: datetime
    vt_to: datetime | None
    tt: LogPosition

    def __post_init__(self) -> None:
        if self.op == "assert" and self.object is None:
            raise ValueError(f"fact entry {self.event_id}: an assert must name its object")
        for name in ("vt_from", "vt_to"):
            value = getattr(self, name)
            if value is not None and value.utcoffset() is None:
                raise ValueError(f"fact entry {self.event_id}: {name} must be timezone-aware")

    @property
    def order(self) -> tuple[LogPosition, str]:
        """Sort key of entries: transaction time, then event id (a deterministic tie-break)."""
        return (self.tt, self.event_id)


@dataclass(frozen=True)
class FactVersion:
    """One bitemporal version of a fact: a valid-time segment as known over a tt interval.

    ``source_event_id`` is the event that asserted this value; ``closed_by_event_id`` the event
    whose arrival ended this version in transaction time (None while current).
    """

    version_id: str
    tenant: str
    subject: str
    relation: str
    object: str
    vt_from: datetime
    vt_to: datetime | None
    tt_from: datetime
    tt_from_partition: int
    tt_from_offset: int
    tt_to: datetime | None
    tt_to_partition: int | None
    tt_to_offset: int | None
    source_event_id: str
    closed_by_event_id: str | None

    @property
    def tt_from_pos(self) -> LogPosition:
        return LogPosition(self.tt_from, self.tt_from_partition, self.tt_from_offset)

    @property
    def tt_to_pos(self) -> LogPosition | None:
        if self.tt_to is None or self.tt_to_partition is None or self.tt_to_offset is None:
            return None
        return LogPosition(self.tt_to, self.tt_to_partition, self.tt_to_offset)

    @property
    def is_current(self) -> bool:
        return self.tt_to is None

    def closed(self, at: LogPosition, by_event_id: str) -> FactVersion:
        """This version, ended in transaction time at ``at`` by ``by_event_id``."""
        return replace(
            self,
            tt_to=at.log_time,
            tt_to_partition=at.partition,
            tt_to_offset=at.offset,
            closed_by_event_id=by_event_id,
        )

    def reopened(self) -> FactVersion:
        """This version with its transaction-time end removed (used to recompute history)."""
        return replace(
            self, tt_to=None, tt_to_partition=None, tt_to_offset=None, closed_by_event_id=None
        )


def version_id_for(
    *,
    tenant: str,
    subject: str,
    relation: str,
    object: str,
    vt_from: datetime,
    vt_to: datetime | None,
    tt_from: LogPosition,
    source_event_id: str,
) -> str:
    """Deterministic id of a version: replays and recomputations give the same ids."""
    parts = (
        tenant,
        subject,
        relation,
        object,
        vt_from.isoformat(),
        "" if vt_to is None else vt_to.isoformat(),
        tt_from.log_time.isoformat(),
        str(tt_from.partition),
        str(tt_from.offset),
        source_event_id,
    )
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16)
    return digest.hexdigest()


@dataclass(frozen=True)
class PutRecord:
    """Insert the raw record (idempotent by ``row.event_id``)."""

    row: RecordRow


@dataclass(frozen=True)
class PutMemory:
    """Insert the memory row (idempotent by ``row.memory_id``); the sink embeds ``row.text``."""

    row: MemoryRow


@dataclass(frozen=True)
class PutFactEntry:
    """Store a fact timeline input (upsert by ``entry.event_id``)."""

    entry: FactEntry


@dataclass(frozen=True)
class DeleteFactEntry:
    """Remove a fact timeline input (only ever emitted by forgetting)."""

    event_id: str


@dataclass(frozen=True)
class PutFactVersion:
    """Upsert a fact version by ``row.version_id`` (a close re-puts the row with ``tt_to``)."""

    row: FactVersion


@dataclass(frozen=True)
class DeleteFactVersion:
    """Remove a version that is no longer derived (after out-of-order delivery or a forget)."""

    version_id: str


Mutation = (
    PutRecord | PutMemory | PutFactEntry | DeleteFactEntry | PutFactVersion | DeleteFactVersion
)
