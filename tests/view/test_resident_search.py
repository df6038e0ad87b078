"""The resident search index (:mod:`memstack.view.resident`) against its references, on real
LanceDB tables (its BM25 leg: ``test_resident_bm25.py``).

- Vectors: exact cosine while small; over inverted lists, recall of the exact top 40 >= 0.95
  on clustered vectors, every distance exact.
- Searches answer what the search through LanceDB answers (``mode="vector"``, exact there
  below 10k rows): now, as of a past known time and a log cut, in a session and by kind.
- It follows the table: appends (new fragments), a compaction (rows move), deletes and the
  forget store's erase and purge; a forgotten row is never returned, by this handle or a
  read-only one opened beside it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstack.operators.forget import Tombstones
from memstack.pipelines.forgetting.lance_store import LanceForgetStore
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.lance_index import LanceVectorIndex
from memstack.view import MemoryView
from memstack.view.resident import Scope, resident_of, vector_lists
from memstack.view.resident.registry import ENV, MAX_ROWS_ENV
from memstack.view.resident.vector_lists import VectorLists
from tests.forget.givens import request
from tests.view.resident_givens import (
    DIM,
    T0,
    V0,
    FixedEncoder,
    bm25_reference,
    lance_of,
    rows_of,
)


def test_vectors_exact_while_small_and_recall_over_lists(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    rng = np.random.default_rng(2)
    dim = 64  # clusters as sentence embeddings have them: cosine ~0.5 within, ~0 across
    centroids = vector_lists.unit(rng.standard_normal((40, dim)))
    data = vector_lists.unit(centroids[rng.integers(40, size=6000)]
                             + rng.standard_normal((6000, dim)) / np.sqrt(dim))
    everything = lambda at: np.ones(len(at), dtype=bool)  # noqa: E731
    small = VectorLists(dim)
    small.append(np.arange(500, dtype=np.int64), data[:500])
    assert small.lists == 0
    query = data[7] + rng.standard_normal(dim) * 0.1
    at, distance = small.nearest(query, everything, 40)
    exact = data[:500] @ vector_lists.unit(query)
    assert at.tolist() == np.argsort(-exact, kind="stable")[:40].tolist()
    assert distance == pytest.approx(1 - np.sort(exact)[::-1][:40], abs=1e-5)

    monkeypatch.setattr(vector_lists, "FLAT_ROWS", 2000)
    listed = VectorLists(dim)
    for lo in range(0, 6000, 700):  # trained at 2,000 rows, appended after
        listed.append(np.arange(lo, min(6000, lo + 700), dtype=np.int64), data[lo:lo + 700])
    assert listed.lists > 0
    recall = []
    for q in range(50):
        query = data[q * 97] + rng.standard_normal(dim) / np.sqrt(dim)
        odd = lambda at: at % 2 == 1  # noqa: E731  # a scope: half the rows
        at, distance = listed.nearest(query, odd, 40)
        exact = data @ vector_lists.unit(query)
        exact[::2] = -np.inf
        truth = set(np.argsort(-exact)[:40].tolist())
        recall.append(len(truth & set(at.tolist())) / 40)
        assert all(a % 2 == 1 for a in at.tolist())
        assert distance == pytest.approx(1 - exact[at], abs=1e-5)
    assert float(np.mean(recall)) >= 0.95


def test_vectors_by_position_in_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over inverted lists, a row's vector is found by its position (a filter's rows are
    scored exactly), across a retraining, and a dead row's vector is zeroed where it lies."""
    rng = np.random.default_rng(3)
    dim = 32
    data = vector_lists.unit(rng.standard_normal((5000, dim)))
    monkeypatch.setattr(vector_lists, "FLAT_ROWS", 600)
    listed = VectorLists(dim)
    for lo in range(0, 5000, 450):  # trained at 600 rows, again at 2,400 (4x), appended between
        listed.append(np.arange(lo, min(5000, lo + 450), dtype=np.int64), data[lo:lo + 450])
    assert listed.lists > 0
    some = np.sort(rng.choice(5000, 300, replace=False))
    assert np.allclose(listed.vectors_at(some), data[some], atol=1e-6)
    query = rng.standard_normal(dim)
    at, distance = listed.exact(query, some, 20)
    cosine = data[some] @ vector_lists.unit(query)
    assert at.tolist() == some[np.argsort(-cosine, kind="stable")[:20]].tolist()
    assert distance == pytest.approx(1 - np.sort(cosine)[::-1][:20], abs=1e-5)
    nothing, far = listed.exact(query, np.empty(0, np.int64), 20)  # a filter keeping no row
    assert nothing.tolist() == [] and far.tolist() == []
    dead = some[:50]
    listed.zero(dead)
    assert not listed.vectors_at(dead).any()
    assert np.allclose(listed.vectors_at(some[50:]), data[some[50:]], atol=1e-6)
    everything = lambda at: np.ones(len(at), dtype=bool)  # noqa: E731
    found, _ = listed.nearest(data[int(some[60])], everything, 1)
    assert found.tolist() == [int(some[60])]


ROWS = rows_of(900)
VECTORS = np.random.default_rng(6).standard_normal((900, DIM)).astype(np.float32)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("resident") / "stores"
    with Stores.open(directory, dim=DIM) as stores:
        for lo in range(0, len(ROWS), 100):
            stores.vectors.merge(ROWS[lo:lo + 100], VECTORS[lo:lo + 100], maintain=False)
    return directory


@pytest.mark.parametrize("at", [{}, {"known": T0 + timedelta(hours=300)},
                                {"known": {0: 200, 1: 150}},
                                {"valid": V0 + timedelta(minutes=900)}],
                         ids=["now", "past-known", "cut", "early-valid"])
@pytest.mark.parametrize("scope", [{}, {"session": "s2"}, {"kinds": ["note"]},
                                   {"subject": "who1"}], ids=["all", "session", "kind",
                                                              "subject"])
def test_a_vector_search_answers_what_lancedb_answers(
        written: Path, at: dict[str, Any], scope: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with Stores.open(written, read_only=True, dim=DIM) as stores:
        view = MemoryView("t0", stores, encoder=FixedEncoder(VECTORS[11])).as_of(**at)
        got = view.search("anything", 15, mode="vector", **scope)
        assert resident_of(stores.vectors) is not None
        monkeypatch.setenv(ENV, "0")
        assert resident_of(stores.vectors) is None
        want = view.search("anything", 15, mode="vector", **scope)
    assert got and [h.memory for h in got] == [h.memory for h in want]
    assert [h.score.vector_distance for h in got] == pytest.approx(
        [h.score.vector_distance for h in want], abs=1e-4)


def test_it_follows_appends_compaction_deletes_and_forget(tmp_path: Path) -> None:
    rows = rows_of(700)
    vectors = np.random.default_rng(1).standard_normal((700, DIM)).astype(np.float32)
    index = lance_of(tmp_path, rows[:500], vectors[:500])
    resident = resident_of(index)
    assert resident is not None and resident.rows.live() == 500

    def everything(handle: LanceVectorIndex, tenant: str = "t0") -> set[str]:
        found = resident_of(handle)
        assert found is not None
        out: set[str] = set()
        for v in vectors[:50]:
            out |= set(found.vector_candidates(v, tenant, Scope(), 700)
                       .column("memory_id").to_pylist())
        return out

    index.merge(rows[500:], vectors[500:], maintain=False)  # new fragments
    assert everything(index) == {r.memory_id for r in rows if r.tenant == "t0"}
    positions = dict(resident.rows.ids)
    index.maintain(force=True)  # a compaction: the rows move to new fragments
    assert everything(index) == {r.memory_id for r in rows if r.tenant == "t0"}
    assert resident.rows.ids == positions and resident.rows.live() == 700  # none read twice
    beside = LanceVectorIndex(tmp_path / "lance", dim=DIM, read_only=True)
    assert everything(beside) == everything(index)

    index.delete(["m0", "m2"])
    forget = LanceForgetStore.over(index)
    forget.forget(Tombstones(request({"type": "tenant"}), frozenset({"m4", "m600"})))
    gone = {"m0", "m2", "m4", "m600"}
    for handle in (index, beside):
        assert everything(handle) == {r.memory_id for r in rows if r.tenant == "t0"} - gone
        found = resident_of(handle)
        assert found is not None and found.rows.live() == 700 - len(gone)
        for query in ("camping lake", "kids fish grilled painting"):
            hits = found.text_candidates(query, "t0", Scope(), 700)
            assert not gone & set(hits.column("memory_id").to_pylist())
        dead = np.array(sorted(found.rows.ids[m] for m in gone), dtype=np.int64)
        held = found.rows.take(dead)  # nothing of a forgotten row stays in the copy
        assert set(held.column("text").to_pylist()) == {""}
        assert set(held.column("metadata_json").to_pylist()) == {"{}"}
        assert found.postings.holding(dead) == set()
        assert found.postings.holding(np.array([found.rows.ids["m6"]])) != set()
        for position in dead.tolist():
            assert not found.vectors.vector_of(position).any()
    statistics = bm25_reference([r for r in rows if r.memory_id not in gone], "t0", "camping", 5)
    top = resident.text_candidates("camping", "t0", Scope(), 5).column("score").to_pylist()
    assert top == pytest.approx([s.score for s in statistics], rel=1e-5)  # df without them


def test_off_or_above_the_row_cap_searches_go_through_lancedb(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = lance_of(tmp_path, rows_of(50), np.ones((50, DIM), np.float32))
    monkeypatch.setenv(ENV, "0")
    assert resident_of(index) is None
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv(MAX_ROWS_ENV, "49")
    assert resident_of(index) is None
    monkeypatch.setenv(MAX_ROWS_ENV, "50")
    assert resident_of(index) is not None
    monkeypatch.setenv(MAX_ROWS_ENV, "many")
    with pytest.raises(ValueError, match="MEMSTACK_RESIDENT_MAX_ROWS='many'"):
        resident_of(index)


def test_a_held_index_is_refreshed_on_demand(tmp_path: Path) -> None:
    """After a forget's hide the service refreshes its copy at once (``refresh_held``), before
    any search; with no copy held it does nothing."""
    from memstack.view.resident.registry import refresh_held

    index = lance_of(tmp_path, rows_of(40), np.ones((40, DIM), np.float32))
    refresh_held(index)
    held = resident_of(index)
    assert held is not None and held.rows.live() == 40
    index.delete(["m1"])
    refresh_held(index)
    assert held.rows.live() == 39
    assert held.rows.take(np.array([held.rows.ids["m1"]])).column("text").to_pylist() == [""]


def test_a_large_table_is_copied_in_the_background(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``SYNC_ROWS`` the first search does not wait for the copy: it goes through
    LanceDB (None) while a thread builds it; a caller that waits gets it built."""
    from memstack.view.resident import registry as resident

    monkeypatch.setattr(resident, "SYNC_ROWS", 10)
    vectors = lance_of(tmp_path, rows_of(40), np.ones((40, DIM), np.float32))
    first = resident_of(vectors)
    built = resident_of(vectors, wait=True)
    assert built is not None and built.rows.live() == 40
    assert first is None
    assert resident_of(vectors) is built  # ready: every search uses it


def test_a_copy_that_fails_to_follow_leaves_searches_to_lancedb(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memstack.view.resident import registry as resident

    vectors = lance_of(tmp_path, rows_of(30), np.ones((30, DIM), np.float32))
    held = resident_of(vectors)
    assert held is not None

    def broken(*args: Any) -> None:
        raise OSError("a fragment could not be read")

    monkeypatch.setattr(resident.ResidentIndex, "refresh", broken)
    vectors.merge(rows_of(31)[30:], np.ones((1, DIM), np.float32), maintain=False)
    assert resident_of(vectors) is None   # the search goes through LanceDB
    monkeypatch.undo()
    assert resident_of(vectors) is None   # and stays there a while
    monkeypatch.setattr(resident, "RETRY_AFTER_S", 0.0)
    again = resident_of(vectors)
    assert again is not None and again is not held and again.rows.live() == 31


def test_a_copy_that_fails_while_answering_is_dropped_and_lancedb_answers(
        written: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memstack.view.resident import registry as resident

    with Stores.open(written, read_only=True, dim=DIM) as stores:
        view = MemoryView("t0", stores, encoder=FixedEncoder(VECTORS[11]))
        assert resident_of(stores.vectors) is not None

        def broken(*args: Any) -> None:
            raise ValueError("Schema at index 1 was different")  # the bug this guards

        monkeypatch.setattr(resident.ResidentIndex, "memories", broken)
        got = view.search("lake camping", 10)
        assert resident.drop_failed(stores.vectors) is False  # dropped already: not held
        monkeypatch.undo()
        monkeypatch.setenv(ENV, "0")
        want = view.search("lake camping", 10)
    assert got and [h.memory for h in got] == [h.memory for h in want]
