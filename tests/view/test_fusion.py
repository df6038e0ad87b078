"""Reciprocal rank fusion (pure): ranks, ties, score parts."""

from __future__ import annotations

from memstack.view.fusion import BM25_WEIGHT, RRF_K, VECTOR_WEIGHT, Candidate, fuse


def hit(memory_id: str, score: float) -> Candidate:
    return Candidate(memory_id, score)


def test_rows_found_by_both_retrievers_rank_first() -> None:
    fused = fuse([hit("a", 9.0), hit("b", 5.0)], [hit("c", 0.1), hit("b", 0.2)], 3)
    assert [h.memory_id for h in fused] == ["b", "a", "c"]
    b = fused[0].score
    assert (b.bm25_rank, b.bm25_score, b.vector_rank, b.vector_distance) == (2, 5.0, 2, 0.2)
    assert b.fused == BM25_WEIGHT / (RRF_K + 2) + VECTOR_WEIGHT / (RRF_K + 2)
    assert [h.rank for h in fused] == [1, 2, 3]


def test_single_retriever_keeps_its_order_and_k_cuts() -> None:
    fused = fuse([], [hit("x", 0.1), hit("y", 0.3), hit("z", 0.5)], 2)
    assert [h.memory_id for h in fused] == ["x", "y"]
    assert all(h.score.bm25_rank is None for h in fused)
    assert fuse([], [], 5) == []


def test_duplicates_count_once_and_ties_break_by_rank_then_id() -> None:
    fused = fuse([hit("a", 1.0), hit("a", 0.5)], [], 5)
    assert len(fused) == 1 and fused[0].score.bm25_rank == 1
    tie = fuse([hit("q", 1.0)], [hit("p", 0.1)], 2)
    # q: 1.5/(k+1) beats p: 1/(k+1) because BM25 weighs more; equal weights would tie -> id
    assert [h.memory_id for h in tie] == (["q", "p"] if BM25_WEIGHT > VECTOR_WEIGHT
                                                  else ["p", "q"])


def test_fusion_is_the_documented_rule_on_random_lists() -> None:
    """Against the rule written plainly: a row's first rank in each list, its score the sum of
    weight / (rrf_k + rank), order by score, then best single rank, then id."""
    import random

    rng = random.Random(5)
    for _ in range(200):
        ids = [f"m{i}" for i in range(rng.randint(0, 30))]
        text = [hit(rng.choice(ids), rng.random()) for _ in range(rng.randint(0, 25))] if ids \
            else []
        vector = [hit(rng.choice(ids), rng.random()) for _ in range(rng.randint(0, 25))] if ids \
            else []
        k = rng.randint(1, 40)
        first_text: dict[str, tuple[int, float]] = {}
        for rank, h in enumerate(text, start=1):
            first_text.setdefault(h.memory_id, (rank, h.score))
        first_vector: dict[str, tuple[int, float]] = {}
        for rank, h in enumerate(vector, start=1):
            first_vector.setdefault(h.memory_id, (rank, h.score))
        expected = []
        for m in set(first_text) | set(first_vector):
            t, v = first_text.get(m), first_vector.get(m)
            score = (BM25_WEIGHT / (RRF_K + t[0]) if t else 0.0) + (
                VECTOR_WEIGHT / (RRF_K + v[0]) if v else 0.0)
            best = min(x[0] for x in (t, v) if x is not None)
            expected.append((-score, best, m))
        expected.sort()
        fused = fuse(text, vector, k)
        assert [f.memory_id for f in fused] == [m for _, _, m in expected[:k]]
        for f in fused:
            t, v = first_text.get(f.memory_id), first_vector.get(f.memory_id)
            assert (f.score.bm25_rank, f.score.bm25_score) == (t if t else (None, None))
            assert (f.score.vector_rank, f.score.vector_distance) == (v if v else (None, None))
            assert abs(f.score.fused - -dict((m, s) for s, _, m in expected)[f.memory_id]) < 1e-12
