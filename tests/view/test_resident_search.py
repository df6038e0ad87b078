"""The resident search index (:mod:`memstack.view.resident`) against its references, on real
LanceDB tables.

- BM25: the leg's ranking and scores are those of the pure reference
  (:func:`memstack.pipelines.shards.bm25.rank` over the tenant's rows in scope as token
  counts, the statistics theirs), over several fragments.
- Vectors: exact cosine while small; over inverted lists, recall of the exact top 40 >= 0.95
  on clustered vectors, every distance exact.
- Searches answer what the search through LanceDB answers (``mode="vector"``, exact there
  below 10k rows): now, as of a past known time and a log cut, in a session and by kind.
- It follows the table: appends (new fragments), a compaction (rows move), deletes and the
  forget store's erase and purge; a forgotten row is never returned, by this handle or a
  read-only one opened beside it.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstack.operators.forget import Tombstones
from memstack.operators.mutations import MemoryRow
from memstack.pipelines.forgetting.lance_store import LanceForgetStore
from memstack.pipelines.shards import bm25
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.lance_index import LanceVectorIndex
from memstack.view import MemoryView
from memstack.view.resident import Scope, resident_of, vector_lists
from memstack.view.resident.postings import Postings
from memstack.view.resident.registry import ENV, MAX_ROWS_ENV
from memstack.view.resident.vector_lists import VectorLists
from tests.forget.givens import request

DIM = 16
T0 = datetime(2025, 1, 1, tzinfo=UTC)
V0 = datetime(2024, 1, 1, tzinfo=UTC)
WORDS = ["camping", "lake", "kids", "fish", "grilled", "painting", "sunset", "Porto", "Lisbon",
         "guitar", "concert", "books", "running", "marathon", "paints", "painted", "hikes",
         "hiking", "dog", "cat"]


def _row(i: int, tenant: str, text: str, session: str = "s", kind: str = "message") -> MemoryRow:
    return MemoryRow(f"m{i}", f"m{i}", tenant, session, f"who{i % 3}", kind, text,
                     V0 + timedelta(minutes=3 * i), None, T0 + timedelta(hours=i), None,
                     i % 2, i, {})


def _rows(n: int, seed: int = 4) -> list[MemoryRow]:
    rng = random.Random(seed)
    return [_row(i, f"t{i % 2}", " ".join(rng.choices(WORDS, k=rng.randint(3, 12))),
                 session=f"s{i // 50}", kind="message" if i % 4 else "note") for i in range(n)]


def _index(tmp_path: Path, rows: list[MemoryRow], vectors: np.ndarray[Any, Any],
           batch: int = 100) -> LanceVectorIndex:
    index = LanceVectorIndex(tmp_path / "lance", dim=DIM)
    for lo in range(0, len(rows), batch):  # one fragment per batch
        index.merge(rows[lo:lo + batch], vectors[lo:lo + batch], maintain=False)
    return index


def _reference(rows: list[MemoryRow], tenant: str, query: str, n: int,
               keep: Any = lambda r: True) -> list[bm25.Scored]:
    """BM25 by the pure definition, statistics over the tenant's rows in scope."""
    own = [r for r in rows if r.tenant == tenant and keep(r)]
    docs = [Counter(bm25.tokens(r.text)) for r in own]
    terms = bm25.query_terms(query)
    return bm25.rank(bm25.stats_of(docs, terms),
                     bm25.matches_of([r.memory_id for r in own], docs, terms), n)


def test_the_bm25_leg_ranks_as_the_reference(tmp_path: Path) -> None:
    rows = _rows(600)
    index = _index(tmp_path, rows, np.ones((600, DIM), np.float32))
    resident = resident_of(index)
    assert resident is not None
    rng = random.Random(8)
    for _ in range(40):
        query = " ".join(rng.sample(WORDS, 3)) + " the"
        for tenant, scope, keep in (
                ("t0", Scope(), lambda r: True),
                ("t1", Scope(session="s3"), lambda r: r.session == "s3"),
                ("t0", Scope(kinds=frozenset({"note"})), lambda r: r.kind == "note")):
            got = resident.text_candidates(query, tenant, scope, 25)
            want = _reference(rows, tenant, query, 25, keep)
            scores = got.column("score").to_pylist()
            assert scores == pytest.approx([s.score for s in want], rel=1e-5)
            assert set(got.column("tenant").to_pylist()) <= {tenant}
            # the same rows: every row scored above the last one's score (tied rows at the
            # cut may be either)
            cut = want[-1].score + 1e-4 if want else 0.0
            assert {m for m, s in zip(got.column("memory_id").to_pylist(), scores,
                                      strict=True) if s > cut} == \
                {s.memory_id for s in want if s.score > cut}


def test_the_bm25_leg_prunes_common_terms_and_still_ranks_as_the_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A query with a term every row holds (idf ~0) and rarer ones: the common term is looked
    up only for the rows that can still reach the top (MaxScore), and the ranking and scores
    are the reference's, as without the pruning."""
    rng = random.Random(11)
    rows = [_row(i, "t0", " ".join(["says", *rng.choices(WORDS, k=rng.randint(2, 9))]))
            for i in range(3000)]
    index = _index(tmp_path, rows, np.ones((3000, DIM), np.float32), batch=500)
    resident = resident_of(index)
    assert resident is not None
    looked: list[int] = []
    real = Postings._looked_up

    def counted(self: Postings, part: Any, at: Any, mean: float) -> Any:
        looked.append(len(at))
        return real(self, part, at, mean)

    monkeypatch.setattr(Postings, "_looked_up", counted)
    for query in ("says camping Porto", "says marathon guitar cat", "say lake"):
        for n in (5, 25, 60):
            got = resident.text_candidates(query, "t0", Scope(), n)
            want = _reference(rows, "t0", query, n)
            scores = got.column("score").to_pylist()
            assert scores == pytest.approx([s.score for s in want], rel=1e-6)  # float32
            cut = want[-1].score + 1e-4
            assert {m for m, s in zip(got.column("memory_id").to_pylist(), scores,
                                      strict=True) if s > cut} == \
                {s.memory_id for s in want if s.score > cut}
    assert looked and max(looked) < 3000  # pruned: the common term read for a few rows only


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


class _Fixed:
    """A fixed encoder: every query is one vector."""

    name, dim = "fixed", DIM

    def __init__(self, vector: np.ndarray[Any, Any]) -> None:
        self.vector = vector

    def encode(self, texts: list[str]) -> np.ndarray[Any, Any]:
        return np.stack([self.vector for _ in texts])


ROWS = _rows(900)
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
        view = MemoryView("t0", stores, encoder=_Fixed(VECTORS[11])).as_of(**at)
        got = view.search("anything", 15, mode="vector", **scope)
        assert resident_of(stores.vectors) is not None
        monkeypatch.setenv(ENV, "0")
        assert resident_of(stores.vectors) is None
        want = view.search("anything", 15, mode="vector", **scope)
    assert got and [h.memory for h in got] == [h.memory for h in want]
    assert [h.score.vector_distance for h in got] == pytest.approx(
        [h.score.vector_distance for h in want], abs=1e-4)


def test_it_follows_appends_compaction_deletes_and_forget(tmp_path: Path) -> None:
    rows = _rows(700)
    vectors = np.random.default_rng(1).standard_normal((700, DIM)).astype(np.float32)
    index = _index(tmp_path, rows[:500], vectors[:500])
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
    statistics = _reference([r for r in rows if r.memory_id not in gone], "t0", "camping", 5)
    top = resident.text_candidates("camping", "t0", Scope(), 5).column("score").to_pylist()
    assert top == pytest.approx([s.score for s in statistics], rel=1e-5)  # df without them


def test_off_or_above_the_row_cap_searches_go_through_lancedb(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = _index(tmp_path, _rows(50), np.ones((50, DIM), np.float32))
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

    index = _index(tmp_path, _rows(40), np.ones((40, DIM), np.float32))
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
    vectors = _index(tmp_path, _rows(40), np.ones((40, DIM), np.float32))
    first = resident_of(vectors)
    built = resident_of(vectors, wait=True)
    assert built is not None and built.rows.live() == 40
    assert first is None
    assert resident_of(vectors) is built  # ready: every search uses it


def test_a_copy_that_fails_to_follow_leaves_searches_to_lancedb(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memstack.view.resident import registry as resident

    vectors = _index(tmp_path, _rows(30), np.ones((30, DIM), np.float32))
    held = resident_of(vectors)
    assert held is not None

    def broken(*args: Any) -> None:
        raise OSError("a fragment could not be read")

    monkeypatch.setattr(resident.ResidentIndex, "refresh", broken)
    vectors.merge(_rows(31)[30:], np.ones((1, DIM), np.float32), maintain=False)
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
        view = MemoryView("t0", stores, encoder=_Fixed(VECTORS[11]))
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


def test_a_tenant_wide_bm25_counts_each_term_as_a_masked_scan_does() -> None:
    """:meth:`Postings.top` given the tenant (its term counts kept up as lists grow, lists
    held by the tenant alone not masked) ranks as the masked scan of every list, over two
    tenants, batches appended between queries, a term held by one tenant alone and a
    forget that shrinks lists."""
    rng = random.Random(5)
    postings = Postings()
    tenant_of = np.empty(0, np.int32)
    texts: list[str] = []
    alive = np.empty(0, bool)

    def both(query: str, tenant: int, n: int) -> tuple[Any, Any]:
        live = np.flatnonzero(alive & (tenant_of == tenant))
        universe = (len(live), int(postings.length.view()[live].sum()))

        def mask(at: Any) -> Any:
            return (tenant_of[at] == tenant) & alive[at]

        terms = bm25.tokens(query)
        return (postings.top(terms, universe, mask, n, (tenant, tenant_of)),
                postings.top(terms, universe, mask, n))

    checked = 0
    for batch in range(6):
        start = len(texts)
        fresh = [" ".join(["says", *rng.choices(WORDS, k=rng.randint(2, 8))])
                 + (" zebra" if batch % 2 else "") for _ in range(300)]
        owners = np.asarray([rng.randrange(2) if batch % 3 else 0 for _ in fresh], np.int32)
        texts += fresh
        tenant_of = np.concatenate([tenant_of, owners])
        alive = np.concatenate([alive, np.ones(len(fresh), bool)])
        postings.append(np.arange(start, len(texts), dtype=np.int64), fresh, owners.tolist())
        if batch == 4:  # a forget: rows leave their lists
            dead = np.asarray(rng.sample(range(len(texts)), 200), np.int64)
            alive[dead] = False
            postings.forget(dead, tenant_of[dead], [texts[i] for i in dead.tolist()])
        for query in ("says camping Porto", "zebra kids", "says marathon cat", "lake"):
            for tenant in (0, 1):
                (got_at, got), (want_at, want) = both(query, tenant, 25)
                assert got_at.tolist() == want_at.tolist()
                assert got.tolist() == pytest.approx(want.tolist())
                checked += len(got_at)
    assert checked
