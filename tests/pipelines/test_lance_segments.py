"""Index segments of the Lance table: the tiered merge plan (pure), and on a real LanceDB table
that a refresh indexes only the new rows, the segments stay few, and searches over segments
answer as one index built at once does."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import lance
import pytest

from memstack.operators.mutations import MemoryRow
from memstack.pipelines.stores.lance_files import index_overcount, rewrite_deleted
from memstack.pipelines.stores.lance_index import (
    TEXT_INDEX,
    VECTOR_INDEX,
    IndexPolicy,
    LanceVectorIndex,
)
from memstack.pipelines.stores.lance_segments import merge_plan, segment_rows, tier
from tests.pipelines.helpers import unit_vectors
from tests.pipelines.vector_index_contract import rows_of

FLOOR, WIDTH = 50, 3
POLICY = IndexPolicy(vector_min_rows=200, refresh_rows=FLOOR, merge_width=WIDTH,
                     num_sub_vectors=8, fragment_rows=200)
"""Fragments under 100 rows are compacted (the refreshes' 50-row writes), the first 300 not."""


def test_tiers_grow_by_the_width_from_the_floor() -> None:
    assert [tier(n, 100, 4) for n in (1, 100, 399, 400, 1_599, 1_600, 6_400)] == [
        0, 0, 0, 1, 1, 2, 3]


def test_the_newest_segments_of_one_tier_merge_and_cascade() -> None:
    assert merge_plan([1_000, 100, 100], 100, 4) == []  # three of tier 0: not yet
    assert merge_plan([1_000, 100, 100, 100, 100], 100, 4) == [4]
    # three of tier 1 and four of tier 0: the merged 400 makes four of tier 1, merged too
    assert merge_plan([6_400, 400, 400, 400, 100, 100, 100, 100], 100, 4) == [4, 4]
    assert merge_plan([400, 100, 100, 100, 100], 100, 4) == [4]  # the newest four only
    assert merge_plan([400, 100, 100, 100], 100, 4) == []  # a run of three, and an older 400
    assert merge_plan([100] * 3, 100, 4) == []
    with pytest.raises(ValueError, match="at least 2"):
        merge_plan([100], 100, 1)


def test_a_plan_keeps_fewer_than_width_segments_per_tier() -> None:
    sizes: list[int] = []
    for _ in range(500):  # 500 refreshes of one floor each
        sizes.append(100)
        for k in merge_plan(sizes, 100, 4):
            sizes[-k:] = [sum(sizes[-k:])]
        tiers = [tier(s, 100, 4) for s in sizes]
        assert all(tiers.count(t) < 4 for t in set(tiers))
    assert sum(sizes) == 50_000 and len(sizes) <= 3 * (tier(50_000, 100, 4) + 1)


def varied(rows: list[MemoryRow], seed: int) -> list[MemoryRow]:
    """The rows with texts of seeded random words, so BM25 scores differ from row to row."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(120)]
    return [replace(r, text=" ".join(rng.choices(words, k=rng.randint(4, 16)))) for r in rows]


def uuids(uri: str, name: str) -> list[str]:
    segments = [i for i in lance.dataset(uri).list_indices() if i["name"] == name]
    return [str(i["uuid"]) for i in sorted(segments, key=lambda i: int(i["version"]))]


def test_refreshes_add_segments_for_new_rows_and_merge_them_in_tiers(tmp_path: Path) -> None:
    rows, vecs = varied(rows_of(900), 1), unit_vectors(900, seed=3)
    index = LanceVectorIndex(tmp_path / "lance", policy=POLICY)
    index.merge(rows[:300], vecs[:300])  # the first indexes, then a segment per refresh
    for lo in range(300, 900, FLOOR):
        before = uuids(index.uri, TEXT_INDEX)
        index.merge(rows[lo:lo + FLOOR], vecs[lo:lo + FLOOR])
        after = uuids(index.uri, TEXT_INDEX)
        for name in (TEXT_INDEX, VECTOR_INDEX):
            stats = index._table.index_stats(name)
            assert stats is not None and stats.num_unindexed_rows == 0
        # the first index is not rewritten by a refresh unless a merge takes it in (then one
        # segment is left): new rows get a segment of their own
        assert after[0] == before[0] or len(after) == 1
        sizes = segment_rows(lance.dataset(index.uri))
        for name, segments in sizes.items():
            assert sum(segments) == 900 if lo == 850 else True, name
            tiers = [tier(s, FLOOR, WIDTH) for s in segments]
            assert all(tiers.count(t) < WIDTH for t in set(tiers)), (name, segments)
    assert max(len(s) for s in segment_rows(lance.dataset(index.uri)).values()) > 1
    # merged segments had their fragments merged: fewer fragments than the 12 refreshes made
    assert len(lance.dataset(index.uri).get_fragments()) < 1 + 600 // FLOOR

    whole = LanceVectorIndex(tmp_path / "whole", policy=POLICY)  # one index built at once
    whole.merge(rows, vecs, maintain=False)
    whole.maintain(force=True)
    assert len(uuids(whole.uri, TEXT_INDEX)) == 1
    for query in ("w3 w77", "w100", "w5 w6 w7 w8"):
        ours, theirs = (sorted(((round(h.score, 4), h.memory_id) for h in i.search_text(
            query, tenant="acme", k=30)), reverse=True) for i in (index, whole))
        assert [s for s, _ in ours] == [s for s, _ in theirs], query  # BM25 spans segments
        cut = ours[-1][0]  # rows tied at the cut may be either
        assert {h for h in ours if h[0] > cut} == {h for h in theirs if h[0] > cut}, query
    for i in (5, 420, 899):  # a row of the first index, of a merged segment, of the newest
        assert index.search_vector(vecs[i], tenant="acme", k=1)[0].memory_id == rows[i].memory_id


def test_a_purge_remaps_the_segments_that_hold_deleted_rows(tmp_path: Path) -> None:
    rows, vecs = varied(rows_of(400), 2), unit_vectors(400, seed=4)
    index = LanceVectorIndex(tmp_path / "lance", policy=POLICY)
    index.merge(rows[:300], vecs[:300])
    index.merge(rows[300:350], vecs[300:350])
    index.merge(rows[350:], vecs[350:])
    assert len(uuids(index.uri, TEXT_INDEX)) == 3
    gone = [rows[10], rows[320], rows[399]]  # one row in each segment
    index._table.delete(" OR ".join(f"memory_id = '{r.memory_id}'" for r in gone))
    rewrite_deleted(index.uri, POLICY.fragment_rows)
    dataset = lance.dataset(index.uri)
    for name in (TEXT_INDEX, VECTOR_INDEX):
        assert index_overcount(dataset, name) == 0, name
    index._table.checkout_latest()
    found = {h.memory_id for h in index.search_text(gone[1].text, tenant="acme", k=400)}
    assert not found & {r.memory_id for r in gone}
    assert index.search_vector(vecs[321], tenant="acme", k=1)[0].memory_id == rows[321].memory_id


def test_refreshes_keep_the_trained_partitions_of_the_vector_index(tmp_path: Path) -> None:
    """Lance's default ``optimize_indices()`` (what LanceDB's ``optimize`` runs) rebuilt the
    IVF_PQ index with about one partition per fragment (measured, pylance 14.0.2: 97 trained
    partitions became 4 at 100k rows, 976 became 31 at 1M, so a search with 30 probes read
    almost every code). New segments and merges keep the trained partitions."""
    policy = IndexPolicy(vector_min_rows=10_000, refresh_rows=500, merge_width=2,
                         num_sub_vectors=8)
    rows, vecs = varied(rows_of(22_000), 5), unit_vectors(22_000, seed=6)
    index = LanceVectorIndex(tmp_path / "lance", policy=policy)
    for lo in range(0, 20_000, 5_000):  # four fragments
        index.merge(rows[lo:lo + 5_000], vecs[lo:lo + 5_000], maintain=False)
    index.maintain(force=True)
    for lo in range(20_000, 22_000, 250):  # refreshes, new segments and their merges
        index.merge(rows[lo:lo + 250], vecs[lo:lo + 250])
    stats = lance.dataset(index.uri).stats.index_stats(VECTOR_INDEX)
    assert len(stats["indices"]) > 1
    assert {int(s["num_partitions"]) for s in stats["indices"]} == {20_000 // 1024}
