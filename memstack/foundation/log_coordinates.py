"""Log coordinates, defined once: where the log put a record, and how far a reader has got.

Every layer speaks of the log in these terms, from the client's receipt to the HTTP token to
the stores' applied offsets:

- :class:`LogPosition`: where one record sits (append time, partition, offset); it orders
  events in transaction time. :class:`LogRecord` is a record read back with its position,
  :class:`LoggedEvent` an event decoded from one.
- :class:`Written`: the receipt of one event the log acknowledged (the client's, the service's
  and, as JSON, the HTTP answer's; :class:`WrittenOut` is that JSON's schema).
- :class:`LogCut`: how far a reader has got in one topic, as the *next* offset per partition
  (``{0: 120}``: offsets ``< 120`` of partition 0 are known; a partition not named is not known
  at all). It only ever rises (:meth:`LogCut.advance`), merges by the larger offset per
  partition (:meth:`LogCut.merge`), and :meth:`LogCut.covers` / :meth:`LogCut.knows` answer
  the questions readers ask of it.
- :class:`Position`: a cut of the events topic and one of the forget topic, with its token for
  clients (``e0-12.e2-5.f1-3``: dot-separated ``e<partition>-<next_offset>`` and
  ``f<partition>-<next_offset>`` parts, URL-safe, opaque to clients).

The arithmetic "the next offset is the offset plus one, and a partition's next offset is the
largest seen" is written here only: :func:`next_offset` and :func:`advance` (mutable maps, for
loops over many records), on which the value types build.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from memstack.foundation.errors import MemstackError
from memstack.schemas.events import Event, format_time

K = TypeVar("K")

_PART = re.compile(r"^([ef])(\d{1,6})-(\d{1,19})$")


def next_offset(offset: int) -> int:
    """The offset after ``offset``: what a reader that has ``offset`` reads next."""
    return offset + 1


def advance(offsets: MutableMapping[K, int], key: K, offset: int) -> bool:
    """Move ``offsets[key]`` (a next offset) just past ``offset``, never back; True if it
    moved. For loops over many records; :meth:`LogCut.advance` is the same on the value."""
    return raise_to(offsets, key, next_offset(offset))


def raise_to(offsets: MutableMapping[K, int], key: K, next_: int) -> bool:
    """Raise ``offsets[key]`` to the next offset ``next_`` if that is further (a key not there
    yet is set, even to 0); True if it moved. A lower one never moves it back."""
    current = offsets.get(key)
    if current is None or next_ > current:
        offsets[key] = next_
        return True
    return False


def merged(*cuts: Mapping[K, int]) -> dict[K, int]:
    """The larger next offset per key of all ``cuts``."""
    out: dict[K, int] = {}
    for cut in cuts:
        for key, next_ in cut.items():
            raise_to(out, key, next_)
    return out


class HasOffset(Protocol):
    """Anything at a place in the log: a position, a receipt, a row with its event's place."""

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...


def after(placed: Iterable[HasOffset]) -> dict[int, int]:
    """The next offsets just after every one of ``placed`` (per partition, the largest)."""
    out: dict[int, int] = {}
    for p in placed:
        advance(out, p.partition, p.offset)
    return out


@dataclass(frozen=True, order=True)
class LogPosition:
    """Where an event sits in ``memstack.events``; orders events in transaction time.

    Ordering is by ``(log_time, partition, offset)``: broker append time first, the position as
    a deterministic tie-break between partitions that share a millisecond.
    """

    log_time: datetime
    partition: int
    offset: int

    @property
    def next_offset(self) -> int:
        """The offset after this one in its partition."""
        return next_offset(self.offset)


@dataclass(frozen=True)
class LoggedAt:
    """Where an event sits in the log: partition, offset and the broker's append time."""

    partition: int
    offset: int
    log_time: datetime
    # The catalog's answers name a position this way (fields in this order: its JSON schema in
    # the HTTP service's OpenAPI document); the docstring above is that schema's description.

    @classmethod
    def of(cls, position: LogPosition) -> LoggedAt:
        return cls(position.partition, position.offset, position.log_time)

    @property
    def position(self) -> LogPosition:
        return LogPosition(self.log_time, self.partition, self.offset)


@dataclass(frozen=True)
class LogRecord:
    """One record as the log holds it: key, raw value bytes and position."""

    topic: str
    key: bytes | None
    value: bytes | None
    position: LogPosition
    timestamp_type: int


@dataclass(frozen=True)
class LoggedEvent:
    """An event as read back from the log: the event and where the log put it."""

    event: Event
    position: LogPosition

    @property
    def tt(self) -> LogPosition:
        """Transaction time of this event (its log position)."""
        return self.position


@dataclass(frozen=True)
class Written:
    """Where the log put an event: its partition, offset and log (append) time.

    The receipt of :class:`memstack.client.MemoryClient`, of the service's writer and, as JSON
    (:meth:`to_json`, without the topic), of ``POST /v1/tenants/{tenant}/events``. ``topic`` is
    known to the clients that produce to Kafka; a receipt read from HTTP or from the stores has
    none (``""``), and it takes no part in comparisons.
    """

    event_id: str
    partition: int
    offset: int
    log_time: datetime
    topic: str = field(default="", compare=False)

    @property
    def position(self) -> LogPosition:
        return LogPosition(self.log_time, self.partition, self.offset)

    @property
    def next_offset(self) -> int:
        return next_offset(self.offset)

    def to_json(self) -> dict[str, Any]:
        """The receipt as the HTTP service answers it (:class:`WrittenOut`)."""
        return {"event_id": self.event_id, "partition": self.partition, "offset": self.offset,
                "log_time": format_time(self.log_time)}


class WrittenOut(BaseModel):
    # The JSON schema of Written.to_json in the HTTP service's OpenAPI document (no docstring:
    # it would become the schema's description, and the published document has none).
    event_id: str
    partition: int
    offset: int
    log_time: str

    @classmethod
    def of(cls, written: Written) -> WrittenOut:
        return cls.model_validate(written.to_json())


@dataclass(frozen=True, eq=False)
class LogCut(Mapping[int, int]):
    """How far a reader has got in one topic: per partition, the next offset.

    ``{0: 120, 1: 98}`` means "the events at offsets < 120 of partition 0 and < 98 of
    partition 1 are known"; a partition that is not named is not known at all. This is the form
    of the stores' applied offsets, so a query can be repeated exactly later. A cut is a
    read-only mapping ``partition -> next offset`` and equals any mapping with the same items.
    """

    offsets: tuple[tuple[int, int], ...] = ()
    _map: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_map", dict(self.offsets))

    @classmethod
    def of(cls, offsets: Mapping[int, int] | None = None) -> LogCut:
        """The cut of ``offsets`` (partition -> next offset, both non-negative)."""
        if isinstance(offsets, LogCut):
            return offsets
        items = (offsets or {}).items()
        for partition, offset in items:
            if partition < 0 or offset < 0:
                raise ValueError(f"log position {partition}:{offset} must be non-negative")
        return cls(tuple(sorted((int(p), int(o)) for p, o in items)))

    @classmethod
    def after(cls, placed: Iterable[HasOffset]) -> LogCut:
        """The cut just after every one of ``placed`` (receipts, positions)."""
        return cls.of(after(placed))

    def __getitem__(self, partition: int) -> int:
        return self._map[partition]

    def __iter__(self) -> Iterator[int]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __hash__(self) -> int:
        return hash(self.offsets)

    def as_dict(self) -> dict[int, int]:
        return dict(self._map)

    def advance(self, partition: int, offset: int) -> LogCut:
        """This cut with the event at ``partition``/``offset`` in it; never moves back."""
        out = dict(self._map)
        return LogCut.of(out) if advance(out, partition, offset) else self

    def merge(self, other: Mapping[int, int]) -> LogCut:
        """The cut covering both (the larger next offset per partition)."""
        return LogCut.of(merged(self._map, other))

    def knows(self, partition: int, offset: int) -> bool:
        """Whether the event at ``partition``/``offset`` is inside the cut."""
        return offset < self._map.get(partition, 0)

    def covers(self, wanted: Mapping[int, int]) -> bool:
        """True when every partition ``wanted`` names is read at least that far here."""
        return all(self._map.get(p, 0) >= o for p, o in wanted.items())

    def behind(self, wanted: Mapping[int, int]) -> dict[int, int]:
        """Records still to read per partition to cover ``wanted`` (partitions behind only)."""
        lag = {p: o - self._map.get(p, 0) for p, o in wanted.items()}
        return {p: n for p, n in lag.items() if n > 0}

    def unknown(self, other: Mapping[int, int]) -> set[int]:
        """The partitions ``other`` names and this cut does not."""
        return {p for p in other if p not in self._map}

    def __str__(self) -> str:
        return ",".join(f"{p}:{o}" for p, o in self.offsets)


class InvalidPositionError(MemstackError):
    """A position token is not one a write or forget returned (``e0-12.f1-3`` parts)."""


@dataclass(frozen=True, init=False)
class Position:
    """How far the stores have applied the log: a cut of the events topic and one of the
    forget topic. A write answers the position just after its events, a forget the position
    just after its request; a read ``after=`` a token waits until the applied position covers
    it on every partition the token names."""

    events: LogCut
    forgets: LogCut

    def __init__(self, events: Mapping[int, int] | None = None,
                 forgets: Mapping[int, int] | None = None) -> None:
        object.__setattr__(self, "events", LogCut.of(events))
        object.__setattr__(self, "forgets", LogCut.of(forgets))

    @classmethod
    def after_events(cls, written: Iterable[HasOffset]) -> Position:
        """The position just after these events (a write's answer)."""
        return cls(LogCut.after(written))

    @classmethod
    def after_forgets(cls, written: Iterable[HasOffset]) -> Position:
        """The position just after these forget requests (a forget's answer)."""
        return cls(forgets=LogCut.after(written))

    @property
    def token(self) -> str:
        parts = [f"e{p}-{o}" for p, o in self.events.offsets]
        parts += [f"f{p}-{o}" for p, o in self.forgets.offsets]
        return ".".join(parts)

    @classmethod
    def parse(cls, token: str | None) -> Position:
        """The position of ``token`` (empty or None: the empty position, always covered); a
        partition named twice counts with its larger offset."""
        events: dict[int, int] = {}
        forgets: dict[int, int] = {}
        for part in (token or "").strip().split("."):
            if not part:
                continue
            match = _PART.match(part)
            if match is None:
                raise InvalidPositionError(
                    f"position token part {part[:40]!r} is not 'e<partition>-<offset>' or "
                    "'f<partition>-<offset>'; pass the 'position' a write or forget returned")
            raise_to(events if match[1] == "e" else forgets, int(match[2]), int(match[3]))
        return cls(events, forgets)

    @staticmethod
    def merge_tokens(a: str | None, b: str | None) -> str | None:
        """Two tokens as one (the larger next offset per partition); None when both are."""
        if not a or not b:
            return a or b
        return Position.parse(a).merge(Position.parse(b)).token

    def merge(self, other: Position) -> Position:
        """The position covering both (the larger next offset per partition)."""
        return Position(self.events.merge(other.events), self.forgets.merge(other.forgets))

    def covers(self, wanted: Position) -> bool:
        """True when every partition ``wanted`` names is applied at least that far here."""
        return self.events.covers(wanted.events) and self.forgets.covers(wanted.forgets)

    def behind(self, wanted: Position) -> dict[str, int]:
        """Records still to apply per partition (``e0``, ``f1``...) to cover ``wanted``."""
        lag = {f"e{p}": n for p, n in self.events.behind(wanted.events).items()}
        return lag | {f"f{p}": n for p, n in self.forgets.behind(wanted.forgets).items()}

    def unknown(self, other: Position) -> set[str]:
        """The partitions (``e3``, ``f1``) ``other`` names and this position does not."""
        return ({f"e{p}" for p in self.events.unknown(other.events)}
                | {f"f{p}" for p in self.forgets.unknown(other.forgets)})

    def after(self, since: Position) -> bool:
        """True when this position has something ``since`` does not cover."""
        return not since.covers(self)
