"""The as-of postfilter of one search leg (pure: the retriever is a function of the test)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from memstack.operators.mutations import MemoryRow
from memstack.pipelines.stores import arrow
from memstack.pipelines.stores.lance_index import CANDIDATE_COLUMNS
from memstack.view import MemoryView
from memstack.view.asof import memory_mask
from memstack.view.legs import POSTFILTER_FACTOR, leg
from memstack.view.memory_view import AsOfView
from memstack.view.types import LogCut

T = datetime(2024, 1, 1, tzinfo=UTC)


def row(n: int, vt_days: int, *, partition: int = 0, tt_days: int | None = None,
        vt_to_days: int | None = None) -> MemoryRow:
    at = T + timedelta(days=vt_days)
    tt = at if tt_days is None else T + timedelta(days=tt_days)
    end = None if vt_to_days is None else T + timedelta(days=vt_to_days)
    return MemoryRow(f"m{n}", f"m{n}", "t", "s", None, "note", "x", at, end, tt, None,
                     partition, n)


def candidates(rows: list[MemoryRow]) -> pa.Table:
    table = arrow.memories_table(rows, np.zeros((len(rows), 4)), 4)
    scores = pa.array([float(r.offset) for r in rows], pa.float32())
    return table.select(list(CANDIDATE_COLUMNS)).append_column("score", scores)


class Retriever:
    """Returns ``rows`` best first, filtered like LanceDB would only when given the as-of."""

    def __init__(self, rows: list[MemoryRow]) -> None:
        self.rows = rows
        self.calls: list[tuple[int, str | None]] = []

    def __call__(self, k: int, where: str | None) -> pa.Table:
        self.calls.append((k, where))
        if where is not None and "vt_from" in where:
            return candidates([r for r in self.rows if r.vt_from <= T + timedelta(days=10)][:k])
        return candidates(self.rows[:k])


def view_at(days: int) -> AsOfView:
    memory = MemoryView("t", None)  # type: ignore[arg-type]  # leg never touches the stores
    return memory.as_of(T + timedelta(days=days), T + timedelta(days=days))


def ids(table: pa.Table) -> list[str]:
    return [str(m) for m in table.column("memory_id").to_pylist()]


def test_the_leg_keeps_the_best_rows_that_answer_as_of_in_one_call() -> None:
    rows = [row(n, 0 if n % 2 else 20) for n in range(200)]  # every other row is too late
    search = Retriever(rows)
    assert ids(leg(view_at(10), search, 4, [])) == ["m1", "m3", "m5", "m7"]
    assert search.calls == [(4 * POSTFILTER_FACTOR, None)]


def test_the_leg_falls_back_to_the_prefilter_when_too_few_answer() -> None:
    rows = [row(n, 20) for n in range(100)] + [row(n, 0) for n in range(100, 110)]
    search = Retriever(rows)
    assert ids(leg(view_at(10), search, 4, ["kind = 'note'"])) == ["m100", "m101", "m102",
                                                                   "m103"]
    assert search.calls[0] == (4 * POSTFILTER_FACTOR, "kind = 'note'")
    assert search.calls[1][0] == 4 and "vt_from" in str(search.calls[1][1])


def test_the_arrow_mask_is_the_as_of_predicate() -> None:
    rows = [row(0, 0), row(1, 20), row(2, 0, vt_to_days=5), row(3, 0, tt_days=15),
            row(4, 0, partition=1), row(5, 0, vt_to_days=30)]
    table = candidates(rows)
    by_time = view_at(10).as_of
    assert memory_mask(table, by_time).to_pylist() == [True, False, False, False, True, True]
    cut = MemoryView("t", None).as_of(T + timedelta(days=10),  # type: ignore[arg-type]
                                      LogCut.of({0: 3})).as_of
    assert memory_mask(table, cut).to_pylist() == [True, False, False, False, False, False]
    empty = MemoryView("t", None).as_of(T + timedelta(days=10),  # type: ignore[arg-type]
                                        LogCut.of({})).as_of
    assert memory_mask(table, empty).to_pylist() == [False] * 6
