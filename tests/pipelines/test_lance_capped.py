"""Indexes in segments of bounded size (``IndexPolicy.segment_rows``): the grouping and the
capped merge plan (pure), and on a real LanceDB table that every index is built as capped
segments that answer as one index does, that a purge remaps only the segments covering the
rewritten fragment, and that a retrain and the refreshes keep the cap."""

from __future__ import annotations

from pathlib import Path

import lance
import pytest

from memstack.pipelines.stores.lance_capped import fragment_groups, fts_params
from memstack.pipelines.stores.lance_files import index_overcount, rewrite_deleted
from memstack.pipelines.stores.lance_index import (
    TEXT_INDEX,
    VECTOR_INDEX,
    IndexPolicy,
    LanceVectorIndex,
)
from memstack.pipelines.stores.lance_segments import merge_plan, segments
from tests.pipelines.helpers import unit_vectors
from tests.pipelines.test_lance_segments import varied
from tests.pipelines.vector_index_contract import rows_of

CAP = 200
POLICY = IndexPolicy(vector_min_rows=200, refresh_rows=50, merge_width=3, num_sub_vectors=8,
                     fragment_rows=100, segment_rows=CAP)
NAMES = (TEXT_INDEX, VECTOR_INDEX, "memory_id_idx", "tt_from_idx", "tenant_idx")


def test_fragments_are_grouped_in_order_up_to_the_cap() -> None:
    assert fragment_groups([(0, 100), (1, 100), (2, 100), (3, 50)], 200) == [[0, 1], [2, 3]]
    assert fragment_groups([(0, 500), (1, 10), (2, 0), (3, 10)], 200) == [[0], [1, 3]]
    assert fragment_groups([], 200) == []
    with pytest.raises(ValueError, match="at least one row"):
        fragment_groups([(0, 1)], 0)


def test_merges_stop_short_of_the_cap() -> None:
    assert merge_plan([100, 100, 100, 100], 100, 4) == [4]
    assert merge_plan([100, 100, 100, 100], 100, 4, cap=399) == []
    assert merge_plan([100, 100, 100, 100], 100, 4, cap=400) == [4]
    sizes: list[int] = []
    for _ in range(500):  # 500 refreshes: no segment ever grows past the cap
        sizes.append(100)
        for k in merge_plan(sizes, 100, 4, cap=1_600):
            sizes[-k:] = [sum(sizes[-k:])]
        assert max(sizes) <= 1_600
    assert sum(sizes) == 50_000


def test_the_full_text_index_is_tokenised_as_lancedbs_default() -> None:
    params = fts_params()
    assert params["stem"] and params["remove_stop_words"] and params["lower_case"]


def _segment_sizes(uri: str) -> dict[str, list[int]]:
    return {name: [s.rows for s in found] for name, found in segments(lance.dataset(uri)).items()}


def test_indexes_are_built_as_capped_segments_that_answer_as_one(tmp_path: Path) -> None:
    rows, vecs = varied(rows_of(1_000), 7), unit_vectors(1_000, seed=8)
    index = LanceVectorIndex(tmp_path / "lance", policy=POLICY)
    for lo in range(0, 1_000, 100):  # ten fragments of 100
        index.merge(rows[lo:lo + 100], vecs[lo:lo + 100], maintain=False)
    index.maintain(force=True)
    sizes = _segment_sizes(index.uri)
    for name in NAMES:
        assert sizes[name] == [CAP] * 5, (name, sizes[name])

    whole = LanceVectorIndex(tmp_path / "whole", policy=IndexPolicy(
        vector_min_rows=200, num_sub_vectors=8, fragment_rows=100, segment_rows=10_000))
    whole.merge(rows, vecs, maintain=False)
    whole.maintain(force=True)
    assert _segment_sizes(whole.uri)[TEXT_INDEX] == [1_000]
    for query in ("w3 w77", "w100", "w5 w6 w7 w8"):
        ours, theirs = (sorted(((round(h.score, 4), h.memory_id) for h in i.search_text(
            query, tenant="acme", k=30)), reverse=True) for i in (index, whole))
        assert [s for s, _ in ours] == [s for s, _ in theirs], query  # BM25 spans segments
    for i in (0, 333, 999):  # the vector segments share one model
        assert index.search_vector(vecs[i], tenant="acme", k=1)[0].memory_id == rows[i].memory_id
    assert [r.memory_id for r in index.get([rows[555].memory_id])] == [rows[555].memory_id]

    before = {name: {s.fragments: s for s in found}
              for name, found in segments(lance.dataset(index.uri)).items()}
    index._table.delete(f"memory_id = '{rows[450].memory_id}'")  # fragment 4, segment 3
    assert rewrite_deleted(index.uri, POLICY.fragment_rows).fragments == 1
    dataset = lance.dataset(index.uri)
    for name in NAMES:
        assert index_overcount(dataset, name) == 0 if name in (TEXT_INDEX, VECTOR_INDEX) \
            else True
        after = {s.fragments for s in segments(dataset)[name]}
        kept = after & set(before[name])  # untouched segments cover the same fragments
        assert len(kept) == 4, (name, sorted(map(sorted, after)))
    index._table.checkout_latest()
    assert index.search_vector(vecs[451], tenant="acme", k=1)[0].memory_id == rows[451].memory_id
    assert index.get([rows[450].memory_id]) == []

    index.retrain_vector_index()
    assert max(_segment_sizes(index.uri)[VECTOR_INDEX]) <= CAP
    assert index.search_vector(vecs[7], tenant="acme", k=1)[0].memory_id == rows[7].memory_id


def test_refreshes_keep_every_segment_under_the_cap(tmp_path: Path) -> None:
    rows, vecs = varied(rows_of(1_200), 9), unit_vectors(1_200, seed=10)
    index = LanceVectorIndex(tmp_path / "lance", policy=POLICY)
    index.merge(rows[:CAP], vecs[:CAP])  # one fragment, one segment of each index
    for lo in range(CAP, 1_200, 50):
        index.merge(rows[lo:lo + 50], vecs[lo:lo + 50])
    sizes = _segment_sizes(index.uri)
    for name in NAMES:
        assert sum(sizes[name]) == 1_200 and max(sizes[name]) <= CAP, (name, sizes[name])
