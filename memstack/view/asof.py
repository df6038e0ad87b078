"""As-of coordinates: parsing them, and the predicates that apply them to every row kind.

A row answers a query as of ``(valid, known)`` when ``vt_from <= valid < vt_to`` (``vt_to``
null = open) and it was known: ``tt_from <= known < tt_to`` for a time, or its event lies inside
the :class:`LogCut` for a log position. The rule itself is :mod:`memstack.schemas.asof` (one
definition, rendered as DuckDB SQL, LanceDB SQL, Arrow and Python); this module binds it to
the query layer's :class:`AsOf` for ``records`` and ``search`` (as a LanceDB prefilter,
applied before ranking).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

import pyarrow as pa

from memstack.schemas import asof as rule
from memstack.view.errors import InvalidAsOfError
from memstack.view.types import AsOf, Known, LogCut

MAX_PARTITION = 2**31 - 1
"""The largest partition number a log position may name (Kafka's partitions are int32)."""
MAX_OFFSET = 2**63 - 1
"""The largest next offset a log position may name (Kafka's offsets and the stores' columns
are int64; a larger one cannot be compared in SQL)."""

_CUT = re.compile(r"^\s*\d+\s*:\s*\d+\s*(,\s*\d+\s*:\s*\d+\s*)*$")


def now() -> datetime:
    return datetime.now(UTC)


def aware(value: datetime, name: str) -> datetime:
    """``value`` in UTC; a naive datetime is an error (it would be silently misread)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidAsOfError(f"{name}={value.isoformat()} is naive; give a UTC time (…Z)")
    return value.astimezone(UTC)


def parse_time(text: str, name: str = "time") -> datetime:
    """``now``, an RFC 3339 time with a zone, or a date (midnight UTC)."""
    raw = text.strip()
    if raw.lower() == "now":
        return now()
    try:
        if len(raw) == 10:
            return datetime.combine(date.fromisoformat(raw), datetime.min.time(), UTC)
        value = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
        return aware(value, name)
    except (ValueError, OverflowError) as exc:  # OverflowError: year 1 or 9999 off UTC
        if isinstance(exc, InvalidAsOfError):
            raise
        raise InvalidAsOfError(
            f"{name}={text[:80]!r} is not a time in range; use RFC 3339 like "
            "2024-05-01T12:00:00Z, a date like 2024-05-01, or now") from exc


def parse_cut(text: str) -> LogCut:
    """``"0:120,1:98"`` -> ``LogCut({0: 120, 1: 98})``."""
    if not _CUT.match(text):
        raise InvalidAsOfError(
            f"known={text!r} is not a log position; use partition:next_offset pairs like "
            "0:120,1:98")
    pairs = [part.split(":") for part in text.split(",")]
    offsets: dict[int, int] = {}
    for p, o in pairs:
        if len(p.strip()) > 10 or len(o.strip()) > 19 or int(p) > MAX_PARTITION \
                or int(o) > MAX_OFFSET:
            raise InvalidAsOfError(
                f"known={text[:80]!r}: {p.strip()[:24]}:{o.strip()[:24]} is out of range; a "
                f"partition is at most {MAX_PARTITION} and a next offset at most {MAX_OFFSET}")
        if int(p) in offsets:
            raise InvalidAsOfError(f"known={text[:80]!r} names partition {int(p)} twice")
        offsets[int(p)] = int(o)
    return LogCut.of(offsets)


def parse_known(text: str) -> Known:
    """A transaction time or a log position (``partition:next_offset`` pairs)."""
    return parse_cut(text) if _CUT.match(text) else parse_time(text, "known")


def resolve(valid: datetime | str | None = None,
            known: datetime | LogCut | dict[int, int] | str | None = None) -> AsOf:
    """Coordinates from user input; both default to now."""
    at = now()
    if isinstance(valid, str):
        valid = parse_time(valid, "valid")
    if isinstance(known, str):
        known = parse_known(known)
    elif isinstance(known, dict):
        known = LogCut.of(known)
    vt = at if valid is None else aware(valid, "valid")
    tt: Known = at if known is None else known
    if isinstance(tt, datetime):
        tt = aware(tt, "known")
    return AsOf(vt, tt)


def known_of(as_of: AsOf) -> datetime | LogCut:
    """The transaction coordinate in the rule's terms: a time (default now) or a cut."""
    cut = as_of.known_cut
    return cut if cut is not None else (as_of.known_time or now())


def memory_predicate(as_of: AsOf) -> str:
    """The as-of prefilter of the ``memories`` table (LanceDB SQL)."""
    return rule.lance_sql(as_of.valid, known_of(as_of), rule.INTERVALS)


def memory_mask(table: pa.Table, as_of: AsOf) -> pa.ChunkedArray:
    """:func:`memory_predicate` over a table of memory candidates (vectorised, no nulls).

    ``table`` needs ``vt_from``, ``vt_to``, ``tt_from``, ``tt_to``, ``partition``, ``offset``.
    """
    return rule.arrow_mask(table, as_of.valid, known_of(as_of), rule.INTERVALS)
