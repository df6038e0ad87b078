"""The resident copy of the ``memories`` rows (every column but the vector), by position.

A row's *position* is the order it arrived in; it never changes while the copy lives. Deleted
rows stay in place, marked dead (:attr:`ResidentRows.alive`), until the copy is rebuilt. The
columns a search filters on are held as numpy codes (tenant, session, kind, subject, valid
time), and so are the as-of columns (times as microseconds, the as-of rule's numpy form reads
them: :func:`memstack.schemas.asof.numpy_mask`); the rest as Arrow, read for the hits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from memstack.operators.mutations import MemoryRow
from memstack.schemas import asof as rule
from memstack.schemas.metadata import metadata_of
from memstack.schemas.rows import memories_schema
from memstack.view.resident.grow import Grow

COLUMNS = tuple(n for n in memories_schema().names if n != "vector")
"""The columns held (the stored schema less the embedding)."""
_SCHEMA = pa.schema([memories_schema().field(n) for n in COLUMNS])

AS_OF: tuple[str, ...] = tuple(getattr(rule.INTERVALS, c) for c in (
    "vt_from", "vt_to", "tt_from", "tt_to", "partition", "offset"))
"""The columns of the as-of rule (``memories`` rows: :data:`memstack.schemas.asof.INTERVALS`)."""

Positions = npt.NDArray[np.int64]
Mask = Callable[[Positions], npt.NDArray[np.bool_]]
"""Which of these positions are in the searched scope (their tenant included)."""


def best_first(positions: Positions, scores: npt.NDArray[Any], n: int
               ) -> tuple[Positions, npt.NDArray[Any]]:
    """The ``n`` positions of highest score, best first (ties: the earlier position), with
    their scores."""
    if len(positions) > n:
        top = np.argpartition(-scores, n - 1)[:n]
        positions, scores = positions[top], scores[top]
    order = np.lexsort((positions, -scores))
    return positions[order], scores[order]


class Codes:
    """Strings as small integers, in first-seen order (-1: absent)."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self.values: list[str] = []
        """The value of each code."""

    def code(self, value: str | None) -> int:
        if value is None:
            return -1
        found = self._codes.get(value)
        if found is None:
            found = self._codes[value] = len(self.values)
            self.values.append(value)
        return found

    def get(self, value: str | None) -> int | None:
        """The code of a value seen before, else None."""
        return None if value is None else self._codes.get(value)


class ResidentRows:
    """Memory rows by position, with their codes and a per-session valid-time order."""

    def __init__(self) -> None:
        self._runs: list[pa.Table] = []
        """The rows in runs of consecutive positions, each one Arrow chunk (see :meth:`_merge`)."""
        self._starts: list[int] = []
        self.ids: dict[str, int] = {}
        self.id_of: list[str] = []
        """The ``memory_id`` at each position."""
        self.tenants, self.sessions, self.kinds, self.subjects = Codes(), Codes(), Codes(), Codes()
        self.tenant = Grow(np.int32)
        self.session = Grow(np.int32)
        self.kind = Grow(np.int16)
        self.subject = Grow(np.int32)
        self.as_of = {name: Grow(np.int64) for name in AS_OF}
        """The columns the as-of rule reads, by name (times as microseconds since the
        epoch)."""
        self.vt_from = self.as_of[rule.INTERVALS.vt_from]
        self.alive = Grow(np.bool_)
        self._by_session: dict[int, list[int]] = defaultdict(list)
        self._ordered: dict[int, tuple[Positions, Positions]] = {}

    @property
    def count(self) -> int:
        """Positions given out (dead rows included)."""
        return self.alive.n

    def answering(self, positions: Positions, valid: datetime, known: rule.Known
                  ) -> npt.NDArray[np.bool_]:
        """Which rows at ``positions`` answer as of ``(valid, known)`` (the as-of rule)."""
        held = {name: column.view()[positions] for name, column in self.as_of.items()}
        return rule.numpy_mask(held, valid, known, rule.INTERVALS)

    def live(self) -> int:
        return int(self.alive.view().sum())

    def append(self, table: pa.Table) -> tuple[Positions, pa.Table]:
        """Add the rows of ``table`` (the ``memories`` columns) whose id is not held alive;
        their positions and the rows added."""
        ids = table.column("memory_id").to_pylist()
        fresh, seen = [], set()
        for i, memory_id in enumerate(ids):
            at = self.ids.get(memory_id)
            if (at is None or not self.alive.view()[at]) and memory_id not in seen:
                fresh.append(i)
                seen.add(memory_id)
        if len(fresh) < len(ids):
            table = table.take(pa.array(fresh, pa.int64()))
        table = _conform(table)
        start = self.count
        positions = np.arange(start, start + table.num_rows, dtype=np.int64)
        if not table.num_rows:
            return positions, table
        columns = {n: table.column(n).to_pylist() for n in ("tenant", "session", "kind",
                                                            "subject")}
        self.tenant.append([self.tenants.code(v) for v in columns["tenant"]])
        sessions = [self.sessions.code(v) for v in columns["session"]]
        self.session.append(sessions)
        self.kind.append([self.kinds.code(v) for v in columns["kind"]])
        self.subject.append([self.subjects.code(v) for v in columns["subject"]])
        for name, held in self.as_of.items():
            column = table.column(name)
            held.append(rule.micros_of(column) if pa.types.is_timestamp(column.type)
                        else column.to_numpy().astype(np.int64))
        self.alive.append(np.ones(table.num_rows, dtype=np.bool_))
        for position, memory_id, session in zip(
                positions.tolist(), table.column("memory_id").to_pylist(), sessions, strict=True):
            self.ids[memory_id] = position
            self.id_of.append(memory_id)
            self._by_session[session].append(position)
            self._ordered.pop(session, None)
        self._runs.append(table.combine_chunks())
        self._starts.append(start)
        self._merge()
        return positions, table

    def blank(self, positions: Positions) -> None:
        """Replace the text and metadata of the rows at ``positions`` (dead ones) by empty
        values: what a forget erased does not stay in this copy."""
        run_of = self._run_of(positions)
        for run in np.unique(run_of).tolist():
            table, start = self._runs[run], self._starts[run]
            drop = np.zeros(table.num_rows, dtype=np.bool_)
            drop[positions[run_of == run] - start] = True
            mask = pa.array(drop)
            for name, empty in (("text", ""), ("metadata_json", "{}")):
                column = table.column(name).chunk(0)
                blanked = pc.if_else(mask, pa.scalar(empty, column.type), column)
                i = table.schema.get_field_index(name)  # the field kept: nullable or not
                table = table.set_column(i, table.schema.field(i), blanked)
            self._runs[run] = table

    def take(self, positions: Sequence[int] | Positions,
             columns: Sequence[str] | None = None) -> pa.Table:
        """The rows at ``positions`` (in that order), ``columns`` of them (default all), with
        ``_rowid`` = the position. Each run is read at the offsets asked of it: the cost
        follows the rows asked for, not the rows held."""
        at = np.asarray(positions, dtype=np.int64)
        names = list(columns) if columns is not None else list(COLUMNS)
        run_of = self._run_of(at)
        parts, order = [], []
        for run in np.unique(run_of).tolist():
            chosen = np.flatnonzero(run_of == run)
            parts.append(self._runs[run].select(names).take(
                pa.array(at[chosen] - self._starts[run])))
            order.append(chosen)
        if not parts:
            table = _SCHEMA.empty_table().select(names)
        elif len(parts) == 1:
            table = parts[0]
        else:
            table = pa.concat_tables(parts).combine_chunks().take(
                pa.array(np.argsort(np.concatenate(order), kind="stable")))
        return table.append_column("_rowid", pc.cast(pa.array(at), pa.uint64()))

    def memory_rows(self, positions: Positions) -> list[MemoryRow]:
        """The rows at ``positions`` as :class:`MemoryRow` (in that order), built from the
        codes and times held and the runs' text columns: what ``to_memories(take(...))``
        gives, without an Arrow table per read (``tests/view/test_resident_rows.py``)."""
        at = np.asarray(positions, dtype=np.int64)
        run_of = self._run_of(at).tolist()
        times = {name: self.as_of[name].view()[at].tolist() for name in
                 ("vt_from", "vt_to", "tt_from", "tt_to")}
        codes = [(held.view()[at].tolist(), names.values) for held, names in (
            (self.tenant, self.tenants), (self.session, self.sessions),
            (self.subject, self.subjects), (self.kind, self.kinds))]
        partition = self.as_of["partition"].view()[at].tolist()
        offset = self.as_of["offset"].view()[at].tolist()
        out = []
        for i, (p, run) in enumerate(zip(at.tolist(), run_of, strict=True)):
            table, row = self._runs[run], p - self._starts[run]
            tenant, session, subject, kind = (
                None if code[i] < 0 else values[code[i]] for code, values in codes)
            assert tenant is not None and session is not None and kind is not None
            out.append(MemoryRow(
                memory_id=self.id_of[p], event_id=table.column("event_id")[row].as_py(),
                tenant=tenant, session=session, subject=subject, kind=kind,
                text=table.column("text")[row].as_py(),
                vt_from=rule.time_of(times["vt_from"][i]), vt_to=_time(times["vt_to"][i]),
                tt_from=rule.time_of(times["tt_from"][i]), tt_to=_time(times["tt_to"][i]),
                partition=partition[i], offset=offset[i],
                metadata=metadata_of(table.column("metadata_json")[row].as_py())))
        return out

    def _run_of(self, positions: Positions) -> npt.NDArray[np.intp]:
        return np.searchsorted(np.asarray(self._starts), positions, side="right") - 1

    def session_order(self, session: int) -> Positions:
        """The positions of a session's rows (dead ones too) in valid-time order."""
        return self._session(session)[0]

    def session_times(self, session: int) -> Positions:
        """The valid times (microseconds) of :meth:`session_order`'s rows, ascending."""
        return self._session(session)[1]

    def _session(self, session: int) -> tuple[Positions, Positions]:
        held = self._ordered.get(session)
        if held is None:
            rows = np.array(self._by_session.get(session, ()), dtype=np.int64)
            ordered = rows[np.argsort(self.vt_from.view()[rows], kind="stable")]
            held = self._ordered[session] = (ordered, self.vt_from.view()[ordered])
        return held

    def _merge(self) -> None:
        """Merge the last two runs while the newer is at least half the older (a binary
        counter: O(log rows) runs, every row copied O(log rows) times in all)."""
        while len(self._runs) >= 2 and 2 * self._runs[-1].num_rows >= self._runs[-2].num_rows:
            newer = self._runs.pop()
            self._starts.pop()
            self._runs[-1] = pa.concat_tables([self._runs[-1], newer]).combine_chunks()


def _time(micros: int) -> datetime | None:
    return None if micros == rule.NULL_MICROS else rule.time_of(micros)


def _conform(table: pa.Table) -> pa.Table:
    """``table``'s held columns in the held types (LanceDB gives ``metadata_json`` as JSONB
    bytes holding JSON text; a write gives it as text)."""
    columns = []
    for field in _SCHEMA:
        column = table.column(field.name)
        if column.type != field.type:
            column = pc.cast(column, field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=_SCHEMA)
