"""The as-of rule, defined once, and its forms: DuckDB SQL, LanceDB SQL, Arrow and Python.

A row answers a query as of ``(valid, known)`` when

- it is valid then: ``vt_from <= valid`` and (``vt_to`` is null or ``vt_to > valid``);
- it was known then: for a transaction *time*, ``tt_from <= known`` and (``tt_to`` is null or
  ``tt_to > known``), where rows that are never superseded (raw records) have no ``tt_to``;
  for a log *cut* (per partition, the next offset known), its event's ``offset`` is below the
  cut's offset of its ``partition`` (a partition the cut does not name is not known).

:func:`clauses` states the rule as data (three kinds of clause); every form renders those
clauses, so the forms cannot drift apart, and ``tests/schemas/test_asof_forms.py`` checks on
random rows that real DuckDB, real LanceDB, Arrow and Python select the same rows. Fact
versions known at a *log position* of the fact store (``memstack.view.sql``) are a different
question (which entries of a key were folded in) and have their own rule there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from memstack.foundation.log_coordinates import LogCut
from memstack.schemas.events import format_time
from memstack.schemas.rows import TIME


@dataclass(frozen=True)
class Columns:
    """The columns of a row kind that the rule reads."""

    vt_from: str = "vt_from"
    vt_to: str = "vt_to"
    tt_from: str = "tt_from"
    tt_to: str | None = "tt_to"
    partition: str = "partition"
    offset: str = "offset"


INTERVALS = Columns()
"""Rows with both intervals: memories (``memories``) and fact versions (``fact_versions``)."""
RECORDS = Columns(tt_from="tt", tt_to=None)
"""Raw records: known from their log time on, never superseded."""


@dataclass(frozen=True)
class AtMost:
    """``column <= value``."""

    column: str
    value: datetime


@dataclass(frozen=True)
class OpenAfter:
    """``column IS NULL OR column > value`` (an interval end that has not come yet)."""

    column: str
    value: datetime


@dataclass(frozen=True)
class InCut:
    """The row's event lies inside the cut (false for an empty cut)."""

    partition: str
    offset: str
    cut: LogCut


Clause = AtMost | OpenAfter | InCut


Known = datetime | LogCut | None
"""A time, a cut, or None: the valid half alone (for callers that state known time their own
way, e.g. fact versions known at a log position)."""


def clauses(valid: datetime, known: Known, cols: Columns = INTERVALS) -> list[Clause]:
    """The rule as data, for a query as of ``valid`` and ``known`` (a time or a cut)."""
    out: list[Clause] = [AtMost(cols.vt_from, valid), OpenAfter(cols.vt_to, valid)]
    if known is None:
        return out
    if isinstance(known, datetime):
        out.append(AtMost(cols.tt_from, known))
        if cols.tt_to is not None:
            out.append(OpenAfter(cols.tt_to, known))
    else:
        out.append(InCut(cols.partition, cols.offset, known))
    return out


def duckdb_sql(valid: datetime, known: Known, cols: Columns = INTERVALS,
               alias: str = "") -> tuple[str, list[Any]]:
    """DuckDB: a ``WHERE`` fragment with ``?`` parameters, columns prefixed by ``alias``."""
    params: list[Any] = []
    parts: list[str] = []
    for c in clauses(valid, known, cols):
        if isinstance(c, AtMost):
            parts.append(f"{alias}{c.column} <= ?")
            params.append(c.value)
        elif isinstance(c, OpenAfter):
            parts.append(f"({alias}{c.column} IS NULL OR {alias}{c.column} > ?)")
            params.append(c.value)
        else:
            # `offset` is a reserved word in DuckDB: quote both identifiers
            parts.append(_cut_sql(c, f'{alias}"{c.partition}"', f'{alias}"{c.offset}"'))
    return " AND ".join(parts), params


def lance_sql(valid: datetime, known: Known, cols: Columns = INTERVALS) -> str:
    """LanceDB (DataFusion): a prefilter with literal timestamps (microseconds, UTC)."""
    parts: list[str] = []
    for c in clauses(valid, known, cols):
        if isinstance(c, AtMost):
            parts.append(f"{c.column} <= {lance_time(c.value)}")
        elif isinstance(c, OpenAfter):
            parts.append(f"({c.column} IS NULL OR {c.column} > {lance_time(c.value)})")
        else:  # `partition` and `offset` are reserved words in DataFusion
            parts.append(_cut_sql(c, f"`{c.partition}`", f"`{c.offset}`"))
    return " AND ".join(parts)


def lance_time(value: datetime) -> str:
    """A LanceDB (DataFusion) timestamp literal, microsecond precision, UTC."""
    return f"timestamp '{format_time(value)}'"


def _cut_sql(c: InCut, partition: str, offset: str) -> str:
    parts = [f"({partition} = {p} AND {offset} < {o})" for p, o in c.cut.offsets if o > 0]
    return "(" + " OR ".join(parts) + ")" if parts else "false"


def arrow_mask(table: pa.Table, valid: datetime, known: Known,
               cols: Columns = INTERVALS) -> pa.ChunkedArray:
    """Arrow: a boolean mask over ``table`` (no nulls)."""
    mask = pa.chunked_array([pa.array([True] * table.num_rows, pa.bool_())])
    for c in clauses(valid, known, cols):
        if isinstance(c, AtMost):
            term = pc.fill_null(pc.less_equal(table[c.column], pa.scalar(c.value, TIME)), False)
        elif isinstance(c, OpenAfter):
            column = table[c.column]
            term = pc.or_kleene(pc.is_null(column),
                                pc.greater(column, pa.scalar(c.value, TIME)))
        else:
            term = pa.chunked_array([pa.array([False] * table.num_rows, pa.bool_())])
            for partition, offset in c.cut.offsets:
                term = pc.or_(term, pc.and_(pc.equal(table[c.partition], partition),
                                            pc.less(table[c.offset], offset)))
        mask = pc.and_(mask, pc.fill_null(term, False))
    return mask


def matcher(valid: datetime, known: Known,
            cols: Columns = INTERVALS) -> Callable[[Mapping[str, Any]], bool]:
    """Python: a predicate over rows (mappings of their columns), the clauses built once."""
    parts = clauses(valid, known, cols)

    def matches(row: Mapping[str, Any]) -> bool:
        for c in parts:
            if isinstance(c, AtMost):
                if not row[c.column] <= c.value:
                    return False
            elif isinstance(c, OpenAfter):
                end = row[c.column]
                if end is not None and not end > c.value:
                    return False
            elif not c.cut.knows(row[c.partition], row[c.offset]):
                return False
        return True

    return matches


def visible(row: Mapping[str, Any], valid: datetime, known: Known,
            cols: Columns = INTERVALS) -> bool:
    """Python: whether one row answers as of ``(valid, known)`` (:func:`matcher` for many)."""
    return matcher(valid, known, cols)(row)
