"""The as-of rule, defined once, and its forms: DuckDB SQL, LanceDB SQL, Arrow, numpy and Python.

A row answers a query as of ``(valid, known)`` when

- it is valid then: ``vt_from <= valid`` and (``vt_to`` is null or ``vt_to > valid``);
- it was known then: for a transaction *time*, ``tt_from <= known`` and (``tt_to`` is null or
  ``tt_to > known``), where rows that are never superseded (raw records) have no ``tt_to``;
  for a log *cut* (per partition, the next offset known), its event's ``offset`` is below the
  cut's offset of its ``partition`` (a partition the cut does not name is not known).

Fact versions (:data:`VERSIONS`) also carry the log *position* of their start and end, and
are known at a position ``P`` when ``tt_from <= P < tt_to`` (positions compared as
:class:`LogPosition`: time, partition, offset). At a *cut*, a version's own event is not what
counts but which entries of its fact key ``(tenant, subject, relation)`` were folded in: with
``first`` the key's earliest entry *outside* the cut (:func:`duckdb_outside`), the versions
known are those with ``tt_from < first <= tt_to`` (no ``first``: the current ones), i.e. the
position rule just before ``first`` (:class:`Before`). This is exact whenever the cut holds a
transaction-time prefix of each key's entries, which is the case for any cut the stores
reported as applied unless one key's events were spread over partitions consumed at
different speeds.

:func:`clauses` states the rule as data (three kinds of clause); every form renders those
clauses, so the forms cannot drift apart, and ``tests/schemas/test_asof_forms.py`` checks on
random rows that real DuckDB, real LanceDB, Arrow, numpy and Python select the same rows
(positions, which only fact versions have, are rendered for DuckDB and Python, the forms that
read them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from memstack.foundation.log_coordinates import LogCut, LogPosition
from memstack.schemas.events import format_time
from memstack.schemas.rows import TIME


@dataclass(frozen=True)
class At:
    """The columns of a log position (time, partition, offset), ordered as :class:`LogPosition`
    (null when its ``time`` is)."""

    time: str
    partition: str
    offset: str


@dataclass(frozen=True)
class Columns:
    """The columns of a row kind that the rule reads."""

    vt_from: str = "vt_from"
    vt_to: str = "vt_to"
    tt_from: str = "tt_from"
    tt_to: str | None = "tt_to"
    partition: str = "partition"
    offset: str = "offset"
    tt_from_at: At | None = None
    """The position of ``tt_from``, for rows known at positions (fact versions)."""
    tt_to_at: At | None = None
    first: At | None = None
    """Where each row is given its fact key's earliest entry outside a cut (a join the store
    makes); None: a cut applies to the row's own event (``partition``, ``offset``)."""


INTERVALS = Columns()
"""Rows with both intervals and one event: memories (``memories``)."""
RECORDS = Columns(tt_from="tt", tt_to=None)
"""Raw records: known from their log time on, never superseded."""
FIRST = At("first_tt", "first_partition", "first_offset")
"""The columns a store gives each fact version for its key's earliest entry outside a cut."""
VERSIONS = Columns(tt_from_at=At("tt_from", "tt_from_partition", "tt_from_offset"),
                   tt_to_at=At("tt_to", "tt_to_partition", "tt_to_offset"), first=FIRST)
"""Fact versions (``fact_versions``): both intervals, with positions; a cut applies per key."""
ENTRIES = Columns(tt_from="tt", tt_to=None, partition="tt_partition", offset="tt_offset")
"""Fact entries (``fact_entries``): a key's timeline inputs, at their event's position."""


@dataclass(frozen=True)
class Before:
    """Just before the position in the row's columns ``at`` (its key's first entry outside a
    cut); those null: after every position."""

    at: At


Point = datetime | LogPosition | Before
"""What a transaction column is compared with: a time (``str`` columns), a position or just
before one (:class:`At` columns)."""


@dataclass(frozen=True)
class AtMost:
    """``column <= value`` (an interval start that has come); :class:`Before` a position:
    ``column < position`` (always, when the position is null)."""

    column: str | At
    value: Point


@dataclass(frozen=True)
class OpenAfter:
    """``column IS NULL OR column > value`` (an interval end that has not come yet);
    :class:`Before` a position: ``column IS NULL OR column >= position`` (never, when the
    position is null and the column is not)."""

    column: str | At
    value: Point


@dataclass(frozen=True)
class InCut:
    """The row's event lies inside the cut (false for an empty cut)."""

    partition: str
    offset: str
    cut: LogCut


Clause = AtMost | OpenAfter | InCut


Known = datetime | LogCut | LogPosition | None
"""A time, a cut, a position (rows with positions only), or None: the valid half alone."""


def clauses(valid: datetime, known: Known, cols: Columns = INTERVALS) -> list[Clause]:
    """The rule as data, for a query as of ``valid`` and ``known`` (a time, cut or position)."""
    out: list[Clause] = [AtMost(cols.vt_from, valid), OpenAfter(cols.vt_to, valid)]
    return out if known is None else out + known_clauses(known, cols)


def known_clauses(known: datetime | LogCut | LogPosition, cols: Columns) -> list[Clause]:
    """The known half of the rule: for rows with a transaction interval, a start clause
    (:class:`AtMost`: the row was seen) and an end clause (:class:`OpenAfter`: not yet closed)."""
    if isinstance(known, datetime):
        out: list[Clause] = [AtMost(cols.tt_from, known)]
        return out if cols.tt_to is None else [*out, OpenAfter(cols.tt_to, known)]
    point: Point
    if isinstance(known, LogPosition):
        point = known
    elif cols.first is None:  # the cut applies to the row's own event
        return [InCut(cols.partition, cols.offset, known)]
    else:  # per fact key: just before its first entry outside the cut
        point = Before(cols.first)
    if cols.tt_from_at is None or cols.tt_to_at is None:
        raise ValueError(f"{cols} has no positions: known must be a time or a cut")
    return [AtMost(cols.tt_from_at, point), OpenAfter(cols.tt_to_at, point)]


def duckdb_sql(valid: datetime, known: Known, cols: Columns = INTERVALS,
               alias: str = "") -> tuple[str, list[Any]]:
    """DuckDB: a ``WHERE`` fragment with ``?`` parameters, columns prefixed by ``alias``
    (the columns of :attr:`Columns.first` are not: they come from the store's join)."""
    return duckdb_clauses(clauses(valid, known, cols), alias)


def duckdb_clauses(parts: Sequence[Clause], alias: str = "") -> tuple[str, list[Any]]:
    """DuckDB: ``parts`` (all must hold) as a fragment with ``?`` parameters."""
    params: list[Any] = []
    out: list[str] = []
    for c in parts:
        if isinstance(c, InCut):
            # `offset` is a reserved word in DuckDB: quote both identifiers
            out.append(_cut_sql(c, f'{alias}"{c.partition}"', f'{alias}"{c.offset}"'))
            continue
        column, null = _duck_column(c.column, alias)
        if isinstance(c.value, Before):  # just before the key's first entry outside a cut
            first, absent = _duck_column(c.value.at, "")
            out.append(f"({absent} OR {column} < {first})" if isinstance(c, AtMost) else
                       f"({null} OR (NOT {absent} AND {column} >= {first}))")
            continue
        if isinstance(c.value, LogPosition):
            value = "(?, ?, ?)"
            params += [c.value.log_time, c.value.partition, c.value.offset]
        else:
            value = "?"
            params.append(c.value)
        out.append(f"{column} <= {value}" if isinstance(c, AtMost) else
                   f"({null} OR {column} > {value})")
    return " AND ".join(out), params


def _duck_column(column: str | At, alias: str) -> tuple[str, str]:
    """A column or a position's columns (a row value), and the test that it is null."""
    if isinstance(column, str):
        return f"{alias}{column}", f"{alias}{column} IS NULL"
    names = [f'{alias}"{n}"' for n in (column.time, column.partition, column.offset)]
    return "(" + ", ".join(names) + ")", f"{names[0]} IS NULL"


def duckdb_outside(cut: LogCut, cols: Columns = ENTRIES, alias: str = "") -> str:
    """DuckDB: the rows whose event lies *outside* ``cut`` (a key's entries not folded in)."""
    inside, _ = duckdb_clauses([InCut(cols.partition, cols.offset, cut)], alias)
    return f"NOT {inside}"


def lance_sql(valid: datetime, known: Known, cols: Columns = INTERVALS) -> str:
    """LanceDB (DataFusion): a prefilter with literal timestamps (microseconds, UTC)."""
    parts: list[str] = []
    for c in clauses(valid, known, cols):
        if isinstance(c, InCut):  # `partition` and `offset` are reserved words in DataFusion
            parts.append(_cut_sql(c, f"`{c.partition}`", f"`{c.offset}`"))
            continue
        column, value = _times(c)
        parts.append(f"{column} <= {lance_time(value)}" if isinstance(c, AtMost) else
                     f"({column} IS NULL OR {column} > {lance_time(value)})")
    return " AND ".join(parts)


def lance_time(value: datetime) -> str:
    """A LanceDB (DataFusion) timestamp literal, microsecond precision, UTC."""
    return f"timestamp '{format_time(value)}'"


def _times(c: AtMost | OpenAfter) -> tuple[str, datetime]:
    """The column and time of a clause on times; positions (fact versions, in DuckDB) are
    rendered for DuckDB and Python only."""
    if isinstance(c.column, str) and isinstance(c.value, datetime):
        return c.column, c.value
    raise ValueError(f"{c}: positions are rendered for DuckDB and Python only")


def _cut_sql(c: InCut, partition: str, offset: str) -> str:
    parts = [f"({partition} = {p} AND {offset} < {o})" for p, o in c.cut.offsets if o > 0]
    return "(" + " OR ".join(parts) + ")" if parts else "false"


def arrow_mask(table: pa.Table, valid: datetime, known: Known,
               cols: Columns = INTERVALS) -> pa.ChunkedArray:
    """Arrow: a boolean mask over ``table`` (no nulls)."""
    mask = pa.chunked_array([pa.array([True] * table.num_rows, pa.bool_())])
    for c in clauses(valid, known, cols):
        if isinstance(c, InCut):
            term = pa.chunked_array([pa.array([False] * table.num_rows, pa.bool_())])
            for partition, offset in c.cut.offsets:
                term = pc.or_(term, pc.and_(pc.equal(table[c.partition], partition),
                                            pc.less(table[c.offset], offset)))
        else:
            name, value = _times(c)
            column, at = table[name], pa.scalar(value, TIME)
            term = (pc.fill_null(pc.less_equal(column, at), False) if isinstance(c, AtMost)
                    else pc.or_kleene(pc.is_null(column), pc.greater(column, at)))
        mask = pc.and_(mask, pc.fill_null(term, False))
    return mask


NULL_MICROS = np.iinfo(np.int64).max
"""The numpy form's null time: a time column held as int64 microseconds (UTC) holds this for
null. An open interval end is then later than any time, and a null start never comes."""


def micros_of(column: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.int64]:
    """An Arrow time column as the numpy form reads it (microseconds, :data:`NULL_MICROS`)."""
    values = pc.fill_null(pc.cast(column, pa.int64()), NULL_MICROS)
    return np.asarray(values.to_numpy(), dtype=np.int64)


def numpy_mask(columns: Mapping[str, npt.NDArray[np.int64]], valid: datetime, known: Known,
               cols: Columns = INTERVALS) -> npt.NDArray[np.bool_]:
    """numpy: a boolean mask over rows held as arrays (times as :func:`micros_of` gives them;
    ``partition`` and ``offset`` as integers). Every array has one value per row."""
    mask: npt.NDArray[np.bool_] | None = None
    for c in clauses(valid, known, cols):
        if isinstance(c, InCut):
            partition, offset = columns[c.partition], columns[c.offset]
            term = np.zeros(len(partition), dtype=np.bool_)
            for p, o in c.cut.offsets:
                term |= (partition == p) & (offset < o)
        else:
            name, value = _times(c)
            at = micros(value)
            term = columns[name] <= at if isinstance(c, AtMost) else columns[name] > at
        mask = term if mask is None else mask & term
    assert mask is not None  # the valid half always has clauses
    return mask


def micros(value: datetime) -> int:
    """A UTC time as microseconds since the epoch (the stores' time unit), exactly."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def time_of(value: int) -> datetime:
    """The UTC time of a count of microseconds since the epoch (the inverse of :func:`micros`)."""
    return _EPOCH + timedelta(microseconds=value)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def matcher(valid: datetime, known: Known,
            cols: Columns = INTERVALS) -> Callable[[Mapping[str, Any]], bool]:
    """Python: a predicate over rows (mappings of their columns), the clauses built once."""
    return clause_matcher(clauses(valid, known, cols))


def clause_matcher(parts: Sequence[Clause]) -> Callable[[Mapping[str, Any]], bool]:
    """Python: whether a row satisfies every one of ``parts``."""

    def matches(row: Mapping[str, Any]) -> bool:
        for c in parts:
            if isinstance(c, InCut):
                if not c.cut.knows(row[c.partition], row[c.offset]):
                    return False
                continue
            value = _py_value(row, c.column)
            point = (_py_value(row, c.value.at) if isinstance(c.value, Before) else
                     _py_value(c.value, None))
            if isinstance(c, AtMost):
                if isinstance(c.value, Before):  # just before: strictly earlier
                    if point is not None and not value < point:
                        return False
                elif not value <= point:
                    return False
            elif value is not None:
                if isinstance(c.value, Before):
                    if point is None or not value >= point:
                        return False
                elif not value > point:
                    return False
        return True

    return matches


def _py_value(source: Any, column: str | At | None) -> Any:
    """A row's column (a position's as a tuple, None when null), or a point's value."""
    if column is None:  # a point given by value
        if isinstance(source, LogPosition):
            return (source.log_time, source.partition, source.offset)
        return source
    if isinstance(column, str):
        return source[column]
    if source[column.time] is None:
        return None
    return (source[column.time], source[column.partition], source[column.offset])


def visible(row: Mapping[str, Any], valid: datetime, known: Known,
            cols: Columns = INTERVALS) -> bool:
    """Python: whether one row answers as of ``(valid, known)`` (:func:`matcher` for many)."""
    return matcher(valid, known, cols)(row)
