"""Index maintenance beside the writer: the thread's rules (pure), then the real Lance table
written, deleted from and maintained at the same time."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from memstack.pipelines.stores import lance_background
from memstack.pipelines.stores.lance_background import MaintenanceThread
from memstack.pipelines.stores.lance_index import (
    TEXT_INDEX,
    VECTOR_INDEX,
    IndexPolicy,
    LanceVectorIndex,
)
from tests.pipelines.helpers import unit_vectors
from tests.pipelines.vector_index_contract import rows_of


def test_pokes_during_a_pass_fold_into_one_more_pass_and_poke_never_waits() -> None:
    entered, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def run() -> None:
        runs.append(len(runs))
        entered.set()
        release.wait(10)

    thread = MaintenanceThread(run, "test")
    thread.poke()
    assert entered.wait(10)
    for _ in range(5):  # the pass is held: each poke returns at once
        thread.poke()
    release.set()
    thread.close(10)
    assert runs == [0, 1] and not thread.alive


def test_close_runs_the_pass_asked_for_before_it() -> None:
    runs: list[str] = []
    thread = MaintenanceThread(lambda: runs.append("pass"), "test")
    thread.close(10)
    assert runs == []  # never asked: nothing runs
    thread = MaintenanceThread(lambda: runs.append("pass"), "test")
    thread.poke()
    thread.close(10)
    assert runs == ["pass"]


def test_a_failed_pass_is_logged_and_tried_again_without_a_poke(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lance_background, "RETRY_S", 0.05)
    calls: list[int] = []
    done = threading.Event()

    def run() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("disk full")
        done.set()

    thread = MaintenanceThread(run, "test")
    thread.poke()
    assert done.wait(10)
    thread.close(10)
    assert thread.failures == 1 and thread.last_error is None and len(calls) == 2


def test_a_paused_maintenance_waits_for_the_purge(tmp_path: Path) -> None:
    """maintenance_paused (what a forget's purge holds) keeps a pass from starting."""
    policy = IndexPolicy(vector_min_rows=10_000, refresh_rows=50)
    index = LanceVectorIndex(tmp_path / "lance", policy=policy)
    rows, vecs = rows_of(120), unit_vectors(120)
    index.merge(rows[:10], vecs[:10], maintain=False)
    with index.maintenance_paused():
        index.maintain_soon()
        index.merge(rows[10:], vecs[10:], maintain=False)  # writes go on meanwhile
        assert not {i.name for i in index._table.list_indices()}  # no pass has run
    index.close()  # the pass asked for runs before the thread stops
    assert TEXT_INDEX in {i.name for i in index._table.list_indices()}


def test_writes_deletes_and_maintenance_at_once_lose_nothing(tmp_path: Path) -> None:
    policy = IndexPolicy(vector_min_rows=600, refresh_rows=150, num_sub_vectors=8,
                         merge_width=2)
    index = LanceVectorIndex(tmp_path / "lance", policy=policy)
    rows, vecs = rows_of(2400), unit_vectors(2400)
    deleted: set[str] = set()
    for start in range(0, 2400, 60):
        index.merge(rows[start:start + 60], vecs[start:start + 60], maintain=False)
        index.maintain_soon()
        if start % 600 == 540:  # a hide's delete while a pass may be committing
            gone = [r.memory_id for r in rows[start:start + 5]]
            assert index.delete(gone) == 5
            deleted |= set(gone)
    index.close()
    index = LanceVectorIndex(tmp_path / "lance", policy=policy)
    table = index._table.to_arrow()
    assert sorted(table.column("memory_id").to_pylist()) == sorted(
        r.memory_id for r in rows if r.memory_id not in deleted)
    assert {TEXT_INDEX, VECTOR_INDEX} <= {i.name for i in index._table.list_indices()}
    hits = index.search_vector(vecs[2000], tenant="acme", k=3)  # IVF_PQ + refine: exact top-1
    assert hits[0].row == rows[2000]
