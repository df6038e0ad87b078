"""The as-of postfilter of one search leg (pure: the retriever is a function of the test)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstack.operators.mutations import MemoryRow
from memstack.pipelines.stores.base import MemoryHit
from memstack.view import MemoryView
from memstack.view.memory_view import POSTFILTER_FACTOR, AsOfView

T = datetime(2024, 1, 1, tzinfo=UTC)


def hit(n: int, vt_days: int) -> MemoryHit:
    at = T + timedelta(days=vt_days)
    return MemoryHit(MemoryRow(f"m{n}", f"m{n}", "t", "s", None, "note", "x", at, None, at,
                               None, 0, n), float(n))


class Retriever:
    """Returns ``rows`` best first, filtered like LanceDB would only when given the as-of."""

    def __init__(self, rows: list[MemoryHit]) -> None:
        self.rows = rows
        self.calls: list[tuple[int, str | None]] = []

    def __call__(self, k: int, where: str | None) -> list[MemoryHit]:
        self.calls.append((k, where))
        if where is not None and "vt_from" in where:
            return [h for h in self.rows if h.row.vt_from <= T + timedelta(days=10)][:k]
        return self.rows[:k]


def view_at(days: int) -> AsOfView:
    memory = MemoryView("t", None)  # type: ignore[arg-type]  # _leg never touches the stores
    return memory.as_of(T + timedelta(days=days), T + timedelta(days=days))


def test_the_leg_keeps_the_best_rows_that_answer_as_of_in_one_call() -> None:
    rows = [hit(n, 0 if n % 2 else 20) for n in range(200)]  # every other row is too late
    search = Retriever(rows)
    got = view_at(10)._leg(search, 4, [])
    assert [h.row.memory_id for h in got] == ["m1", "m3", "m5", "m7"]
    assert search.calls == [(4 * POSTFILTER_FACTOR, None)]


def test_the_leg_falls_back_to_the_prefilter_when_too_few_answer() -> None:
    rows = [hit(n, 20) for n in range(100)] + [hit(n, 0) for n in range(100, 110)]
    search = Retriever(rows)
    got = view_at(10)._leg(search, 4, ["kind = 'note'"])
    assert [h.row.memory_id for h in got] == ["m100", "m101", "m102", "m103"]
    assert search.calls[0] == (4 * POSTFILTER_FACTOR, "kind = 'note'")
    assert search.calls[1][0] == 4 and "vt_from" in str(search.calls[1][1])
