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
