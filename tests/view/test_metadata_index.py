"""The metadata index and the id-first search of a selective filter, on real LanceDB.

- The index is a fourth form of the filter language: on random metadata and random filters it
  selects exactly the rows the Python form (:func:`memstack.schemas.filters.matches`, the
  judge) selects, per tenant, over several fragments, and each operator alone selects what its
  definition says.
- It follows the table: rows appended (new fragments), compacted (rows move: new row ids),
  forgotten (the forget store's erase and purge): the forgotten rows are not returned and their
  metadata leaves the index.
- A search under a selective filter takes the id-first path (:mod:`memstack.view.selective`)
  and answers exactly what the prefilter path answers: the same rows, now and as of a past
  known time, with exact vector scores; above the threshold the prefilter answers.
"""

from __future__ import annotations

import json
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
from memstack.schemas.filters import matches, parse_filter
from memstack.view import MemoryView, selective
from memstack.view.metadata_index import MetadataIndex, index_of
from memstack.view.resident.registry import ENV as RESIDENT_ENV
from tests.forget.givens import request
from tests.schemas.test_filter_forms import CASES, FIXED, _filter, _metadata

DIM = 8
T0 = datetime(2025, 1, 1, tzinfo=UTC)
V0 = datetime(2024, 1, 1, tzinfo=UTC)


def _row(i: int, tenant: str, meta: dict[str, Any], session: str = "s") -> MemoryRow:
    at = V0 + timedelta(minutes=4 * i)  # 4 minutes apart: neighbours within a session
    return MemoryRow(f"m{i}", f"m{i}", tenant, session, None, "note", f"note {i} about w{i % 7}",
                     at, None, T0 + timedelta(hours=i), None, 0, i, meta)


def _index(tmp_path: Path, rows: list[MemoryRow], batch: int = 100) -> LanceVectorIndex:
    index = LanceVectorIndex(tmp_path / "lance", dim=DIM)
    vectors = np.random.default_rng(5).standard_normal((len(rows), DIM)).astype(np.float32)
    for lo in range(0, len(rows), batch):  # one fragment per batch
        index.merge(rows[lo:lo + batch], vectors[lo:lo + batch], maintain=False)
    return index


def _selected(index: LanceVectorIndex, tenant: str, spec: Any,
              limit: int | None = None) -> set[str] | None:
    found = index_of(index).rows(index.lance_table, index.uri, tenant, parse_filter(spec),
                                 limit)
    if found is None:
        return None
    ids = found.column("_rowid").to_pylist()
    assert ids == sorted(ids)
    assert set(found.column("tenant").to_pylist()) <= {tenant}
    return set(found.column("memory_id").to_pylist())


def test_the_index_selects_what_the_python_form_selects(tmp_path: Path) -> None:
    rng = random.Random(20261206)
    metas = [_metadata(rng) for _ in range(300)]
    rows = [_row(i, f"t{i % 2}", m) for i, m in enumerate(metas)]
    index = _index(tmp_path, rows)
    sizes = set()
    for _ in range(150):
        spec = _filter(rng)
        f = parse_filter(spec)
        for tenant in ("t0", "t1"):
            expected = {r.memory_id for r in rows if r.tenant == tenant and matches(f, r.metadata)}
            assert _selected(index, tenant, spec) == expected, json.dumps(spec)
            sizes.add(len(expected))
    assert len(sizes) > 20


@pytest.mark.parametrize(("spec", "expected"), CASES, ids=[json.dumps(c[0]) for c in CASES])
def test_each_operator_through_the_index(spec: dict[str, Any], expected: set[int],
                                         tmp_path: Path) -> None:
    index = _index(tmp_path, [_row(i, "acme", m) for i, m in enumerate(FIXED)], batch=2)
    assert _selected(index, "acme", spec) == {f"m{i}" for i in expected}


def test_the_index_follows_appends_compaction_and_forget(tmp_path: Path) -> None:
    rows = [_row(i, "acme", {"ward": i % 5, "patient": f"p{i}"}) for i in range(400)]
    index = _index(tmp_path, rows[:300])
    metadata = index_of(index)
    assert _selected(index, "acme", {"ward": 1}) == {f"m{i}" for i in range(1, 300, 5)}
    index.merge(rows[300:], np.ones((100, DIM), np.float32), maintain=False)  # a new fragment
    assert _selected(index, "acme", {"ward": 1}) == {f"m{i}" for i in range(1, 400, 5)}
    index.maintain(force=True)  # compaction: the rows move, their row ids change
    found = metadata.rows(index.lance_table, index.uri, "acme", parse_filter({"ward": 1}))
    assert found is not None
    moved = index.lance_table.take_row_ids(found.column("_rowid").to_pylist()).select(
        ["memory_id"]).with_row_id().to_arrow().sort_by("_rowid")
    assert moved.column("memory_id").to_pylist() == found.column("memory_id").to_pylist()
    distinct = metadata.distinct
    gone = [6, 11, 301]  # ward 1
    forget = LanceForgetStore.over(index)
    forget.forget(Tombstones(request({"type": "tenant"}), frozenset(f"m{i}" for i in gone)))
    assert _selected(index, "acme", {"ward": 1}) == {f"m{i}" for i in range(1, 400, 5)
                                                     if i not in gone}
    assert _selected(index, "acme", {"patient": {"in": [f"p{i}" for i in gone]}}) == set()
    assert metadata.distinct == distinct - len(gone)  # the forgotten metadata left the index


def test_a_filter_keeping_more_than_the_limit_is_not_resolved(tmp_path: Path) -> None:
    index = _index(tmp_path, [_row(i, "acme", {"ward": i % 2}) for i in range(100)])
    assert _selected(index, "acme", {"ward": 0}, limit=49) is None
    assert _selected(index, "acme", {"ward": 0}, limit=50) == {f"m{i}" for i in range(0, 100, 2)}
    assert _selected(index, "nobody", {"ward": 0}, limit=0) == set()


def test_an_index_of_its_own_per_store(tmp_path: Path) -> None:
    index = _index(tmp_path, [_row(0, "acme", {})])
    assert index_of(index) is index_of(index)
    assert isinstance(index_of(index), MetadataIndex)


# -- search: id-first against the prefilter ------------------------------------------------------

class Spy:
    """Which path each search took (:func:`memstack.view.selective.plan`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[str] = []
        plan = selective.plan

        def spied(*args: Any, **kwargs: Any) -> selective.Slice | selective.Members | None:
            found = plan(*args, **kwargs)
            self.paths.append("prefilter" if found is None else "id-first"
                              if isinstance(found, selective.Slice) else "broad")
            return found

        monkeypatch.setattr(selective, "plan", spied)


class Encoder:
    """A fixed encoder: the query is the vector of note 0 (the vectors are random)."""

    name = "fixed"
    dim = DIM

    def __init__(self, vector: np.ndarray[Any, Any]) -> None:
        self.vector = vector

    def encode(self, texts: list[str]) -> np.ndarray[Any, Any]:
        return np.stack([self.vector for _ in texts])


ROWS = [_row(i, f"t{i % 2}", {"ward": i // 2 % 10, "tags": ["a"] if i % 3 else []},
             session=f"s{i // 40}") for i in range(2000)]
VECTORS = np.random.default_rng(9).standard_normal((len(ROWS), 384)).astype(np.float32)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory = tmp_path_factory.mktemp("idfirst") / "stores"
    with Stores.open(directory) as opened:
        for lo in range(0, len(ROWS), 500):
            opened.vectors.merge(ROWS[lo:lo + 500], VECTORS[lo:lo + 500], maintain=False)
        opened.vectors.maintain(force=True)  # IVF_PQ: the prefilter path's vector leg is an ANN
    with Stores.open(directory, read_only=True) as opened:
        yield opened


SEARCHES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"ward": 3}, {}),
    ({"ward": {"in": [2, 7]}, "tags": {"contains": "a"}}, {}),
    ({"ward": 3}, {"known": T0 + timedelta(hours=900)}),          # a past known time
    ({"ward": {"gte": 8}}, {"valid": V0 + timedelta(hours=60)}),   # an early valid time
    ({"not": {"ward": {"lt": 9}}}, {"known": T0 + timedelta(hours=1500)}),
]


def _passing(spec: dict[str, Any], valid: datetime, known: datetime | None) -> list[int]:
    f = parse_filter(spec)
    return [i for i, r in enumerate(ROWS) if r.tenant == "t0" and matches(f, r.metadata)
            and r.vt_from <= valid and (known is None or r.tt_from <= known)]


@pytest.fixture(params=["resident", "lancedb"])
def held(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where an id-first search ranks the filter's rows: in the resident search index (its
    positions; LanceDB is not read by row id) or read from LanceDB by row id."""
    if request.param == "lancedb":
        monkeypatch.setenv(RESIDENT_ENV, "0")
    else:
        def unread(*args: Any) -> None:
            raise AssertionError("the resident path read the filter's rows from LanceDB")

        monkeypatch.setattr(selective, "read", unread)
    return str(request.param)


def _bm25_reference(passing: list[int], query: str) -> list[tuple[int, float]]:
    """BM25 by its definition over ``passing`` (the statistics theirs): (row, score), best
    first."""
    docs = [Counter(bm25.tokens(ROWS[i].text)) for i in passing]
    terms = bm25.query_terms(query)
    ranked = bm25.rank(bm25.stats_of(docs, terms),
                       bm25.matches_of([f"m{i}" for i in passing], docs, terms), len(passing))
    return [(int(r.memory_id[1:]), round(r.score, 4)) for r in ranked]


@pytest.mark.parametrize("mode", ["hybrid", "bm25", "vector"])
@pytest.mark.parametrize(("spec", "at"), SEARCHES, ids=[json.dumps(s, default=str)
                                                       for s in SEARCHES])
def test_id_first_answers_what_the_prefilter_answers(stores: Stores, spec: dict[str, Any],
                                                     at: dict[str, Any], mode: str, held: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    view = MemoryView("t0", stores, encoder=Encoder(VECTORS[0])).as_of(**at)
    spy = Spy(monkeypatch)
    k = 30
    first = view.search("note about w3", k, mode=mode, filter=spec)  # type: ignore[arg-type]
    monkeypatch.setattr(selective, "ID_FIRST_MAX", -1)
    monkeypatch.setattr(selective, "BROAD_MIN_SHARE", 2.0)
    prefiltered = view.search("note about w3", k, mode=mode, filter=spec)  # type: ignore[arg-type]
    monkeypatch.setattr(selective, "ID_FIRST_BROAD", 0)
    monkeypatch.setattr(selective, "BROAD_MIN_SHARE", 0.0)
    broad = view.search("note about w3", k, mode=mode, filter=spec)  # type: ignore[arg-type]
    assert spy.paths == ["id-first", "prefilter", "broad"]
    passing = _passing(spec, view.as_of.valid, view.as_of.known_time)
    assert passing
    for hits in (first, prefiltered, broad):
        assert hits and {int(h.memory.memory_id[1:]) for h in hits} <= set(passing)
        assert all(h.memory == ROWS[int(h.memory.memory_id[1:])] for h in hits)
    if mode == "bm25":  # the same scores in the same order (tied rows may swap)
        scores = [[round(h.score.bm25_score or 0, 4) for h in hits]
                  for hits in (first, prefiltered, broad)]
        assert scores[1] == scores[2]  # LanceDB: the table's statistics
        if held == "lancedb":
            assert scores[0] == scores[1]
        else:  # the resident index: the statistics of the filter's rows, as for any scope
            everyone = _passing(spec, datetime.max.replace(tzinfo=UTC), None)  # no as-of
            answering = set(passing)
            want = [score for i, score in _bm25_reference(everyone, "note about w3")
                    if i in answering]
            assert scores[0] == want[:k]
    if mode == "vector":  # exact cosine over the rows that pass
        query = VECTORS[0] / np.linalg.norm(VECTORS[0])
        cosine = VECTORS[passing] @ query / np.linalg.norm(VECTORS[passing], axis=1)
        exact = [passing[i] for i in np.argsort(-cosine)[:k]]
        assert [int(h.memory.memory_id[1:]) for h in first] == exact
        assert [h.score.vector_distance for h in first] == pytest.approx(
            [1 - float(c) for c in sorted(cosine, reverse=True)[:k]], abs=1e-5)


def test_the_path_follows_the_rows_that_pass(stores: Stores,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    view = MemoryView("t0", stores, encoder=Encoder(VECTORS[0]))
    spy = Spy(monkeypatch)
    monkeypatch.setattr(selective, "ID_FIRST_MAX", 150)
    monkeypatch.setattr(selective, "ID_FIRST_BROAD", 120)
    monkeypatch.setattr(selective, "BROAD_MIN_SHARE", 0.2)
    view.search("note", 5, filter={"ward": 3})                  # 100 of t0's 1000 rows
    view.search("note", 5, filter={"ward": {"lt": 5}})          # 500: half of them
    view.search("note", 5, filter={"ward": {"in": [1, 2, 3]}})  # 300: 30 %, over 150
    monkeypatch.setattr(selective, "BROAD_MIN_SHARE", 0.6)
    view.search("note", 5, filter={"ward": {"lt": 5}})          # 500, 50 %: under 60 %
    view.search("note", 5, filter={"ward": {"in": [1, 2]}})     # 200, 20 %: over 150
    assert spy.paths == ["id-first", "broad", "broad", "prefilter", "prefilter"]


def test_a_forgotten_row_and_its_metadata_leave_the_search(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [_row(i, "acme", {"patient": f"p{i}", "ward": i % 3}) for i in range(200)]
    vectors = np.random.default_rng(4).standard_normal((len(rows), 384)).astype(np.float32)
    with Stores.open(tmp_path / "stores") as opened:
        opened.vectors.merge(rows, vectors, maintain=False)
        view = MemoryView("acme", opened, encoder=Encoder(vectors[6]))
        spy = Spy(monkeypatch)
        assert [h.memory.memory_id for h in view.search("note", 5, filter={"patient": "p6"})] \
            == ["m6"]
        distinct = index_of(opened.vectors).distinct
        LanceForgetStore.over(opened.vectors).forget(
            Tombstones(request({"type": "tenant"}), frozenset({"m6"})))
        assert view.search("note", 5, filter={"patient": "p6"}) == []
        hits = view.search("note", 200, filter={"ward": 0}, mode="vector")
        assert {h.memory.memory_id for h in hits} == {f"m{i}" for i in range(0, 200, 3) if i != 6}
        assert spy.paths == ["id-first"] * 3
        assert index_of(opened.vectors).distinct == distinct - 1  # p6's metadata is gone


def test_id_first_at_a_log_cut(stores: Stores) -> None:
    view = MemoryView("t0", stores, encoder=Encoder(VECTORS[0])).as_of(known={0: 900})
    hits = view.search("note", 100, mode="vector", filter={"ward": {"in": [1, 4]}})
    expected = {f"m{i}" for i, r in enumerate(ROWS) if r.tenant == "t0" and r.offset < 900
                and r.metadata["ward"] in (1, 4)}
    assert {h.memory.memory_id for h in hits} == expected
