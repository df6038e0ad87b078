"""Positions: how far the stores have applied the log, as an opaque token for clients.

A position maps each partition of ``<prefix>.events`` and ``<prefix>.forget`` to a *next
offset* (the offset after the last record it covers). A write answers the position just after
its events; a forget the position just after its request. A read with ``after=TOKEN`` waits
until the stores' applied position covers the token on every partition the token names.

The token is a string of dot-separated parts ``e<partition>-<next_offset>`` (events topic) and
``f<partition>-<next_offset>`` (forget topic), e.g. ``e0-12.e2-5.f1-3``; all its characters are
URL-safe. Clients treat it as opaque: they keep the token of their last write and pass it back.
Tokens merge by taking the larger offset per partition (:meth:`Position.merge`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from memstack.foundation.errors import MemstackError

_PART = re.compile(r"^([ef])(\d{1,6})-(\d{1,19})$")


class InvalidPositionError(MemstackError):
    """A position token is not one a write or forget returned (``e0-12.f1-3`` parts)."""


def _frozen(offsets: Mapping[int, int] | None) -> Mapping[int, int]:
    return MappingProxyType(dict(sorted((offsets or {}).items())))


@dataclass(frozen=True)
class Position:
    """Next offsets per partition of the events topic and of the forget topic."""

    events: Mapping[int, int] = field(default_factory=dict)
    forgets: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "events", _frozen(self.events))
        object.__setattr__(self, "forgets", _frozen(self.forgets))

    @property
    def token(self) -> str:
        parts = [f"e{p}-{o}" for p, o in self.events.items()]
        parts += [f"f{p}-{o}" for p, o in self.forgets.items()]
        return ".".join(parts)

    @classmethod
    def parse(cls, token: str | None) -> Position:
        """The position of ``token`` (empty or None: the empty position, always covered)."""
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
            target = events if match[1] == "e" else forgets
            partition, offset = int(match[2]), int(match[3])
            target[partition] = max(target.get(partition, 0), offset)
        return cls(events, forgets)

    def merge(self, other: Position) -> Position:
        """The position covering both (the larger next offset per partition)."""
        return Position(_max(self.events, other.events), _max(self.forgets, other.forgets))

    def covers(self, wanted: Position) -> bool:
        """True when every partition ``wanted`` names is applied at least that far here."""
        return all(self.events.get(p, 0) >= o for p, o in wanted.events.items()) and all(
            self.forgets.get(p, 0) >= o for p, o in wanted.forgets.items())

    def behind(self, wanted: Position) -> dict[str, int]:
        """Records still to apply per partition (``e0``, ``f1``...) to cover ``wanted``."""
        lag = {f"e{p}": o - self.events.get(p, 0) for p, o in wanted.events.items()}
        lag |= {f"f{p}": o - self.forgets.get(p, 0) for p, o in wanted.forgets.items()}
        return {k: v for k, v in lag.items() if v > 0}

    def unknown(self, other: Position) -> set[str]:
        """The partitions (``e3``, ``f1``) ``other`` names and this position does not."""
        return ({f"e{p}" for p in other.events if p not in self.events}
                | {f"f{p}" for p in other.forgets if p not in self.forgets})

    def after(self, since: Position) -> bool:
        """True when this position has something ``since`` does not cover."""
        return not since.covers(self)


def _max(a: Mapping[int, int], b: Mapping[int, int]) -> dict[int, int]:
    out = dict(a)
    for p, o in b.items():
        out[p] = max(out.get(p, 0), o)
    return out
