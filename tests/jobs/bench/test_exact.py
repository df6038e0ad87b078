"""The exact-search oracles of the query benchmark, against hand-worked values."""

from __future__ import annotations

import math
import random

import numpy as np

from memstack.jobs.bench.exact import (
    PAD,
    ExactBM25,
    exact_cosine,
    recall_with_ties,
    rrf_top,
    tokenize,
)
from memstack.view.fusion import BM25_WEIGHT, RRF_K, VECTOR_WEIGHT, Candidate, fuse

VOCAB = {w: i for i, w in enumerate(["ana", "lives", "in", "porto", "lisbon", "cat"])}
DOCS = ["Ana lives in Porto", "Porto Porto", "Lisbon cat", "cat"]


def token_matrix(texts: list[str], vocabulary: dict[str, int]) -> np.ndarray:
    """Texts as a ``PAD``-padded token-id matrix (small corpora)."""
    ids = [tokenize(t, vocabulary) for t in texts]
    out = np.full((len(ids), max((len(i) for i in ids), default=0)), PAD, dtype=np.int64)
    for row, terms in enumerate(ids):
        out[row, :len(terms)] = terms
    return out


def _bm25(tf: float, df: int, length: float, n: int, mean: float) -> float:
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / mean))


def test_bm25_scores_match_the_okapi_formula_worked_by_hand() -> None:
    index = ExactBM25(token_matrix(DOCS, VOCAB), len(VOCAB))
    mean = (4 + 2 + 2 + 1) / 4
    scores = index.scores([VOCAB["porto"], VOCAB["porto"], VOCAB["cat"]])  # a term counts once
    assert math.isclose(scores[0], _bm25(1, 2, 4, 4, mean))
    assert math.isclose(scores[1], _bm25(2, 2, 2, 4, mean))
    assert math.isclose(scores[2], _bm25(1, 2, 2, 4, mean))
    assert math.isclose(scores[3], _bm25(1, 2, 1, 4, mean))
    assert scores[1] > scores[0]  # more occurrences in a shorter document


def test_bm25_top_honours_the_filter_and_breaks_ties_by_row() -> None:
    index = ExactBM25(token_matrix(["cat dog", "cat dog", "cat", "dog"],
                                   {"cat": 0, "dog": 1}), 2)
    rows, scores = index.top([0], np.array([True, True, False, True]), 10)
    assert rows.tolist() == [0, 1]  # row 2 is filtered out, row 3 has no "cat"
    assert scores[0] == scores[1]
    assert index.top([5], np.ones(4, dtype=bool), 10)[0].tolist() == []  # unknown term


def test_tokenize_lowercases_and_drops_unknown_words() -> None:
    assert tokenize("ANA, lives in: Paris!", VOCAB) == [0, 1, 2]


def test_exact_cosine_equals_a_python_loop() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((200, 8)).astype(np.float32)
    query = rng.standard_normal(8).astype(np.float32)
    allowed = rng.random(200) < 0.5

    def cos(i: int) -> float:
        return float(vectors[i] @ query / np.linalg.norm(vectors[i]) / np.linalg.norm(query))

    want = sorted((i for i in range(200) if allowed[i]), key=lambda i: -cos(i))[:10]
    assert exact_cosine(vectors, query, allowed, 10).tolist() == want


def test_recall_with_ties_credits_any_row_tied_with_the_kth() -> None:
    scores = np.array([5.0, 4.0, 3.0, 3.0, 3.0, 1.0])
    truth = np.array([5.0, 4.0, 3.0])
    assert recall_with_ties([0, 1, 4], truth, scores, 3) == 1.0  # row 4 ties with the 3rd
    assert recall_with_ties([0, 1, 5], truth, scores, 3) == 2 / 3
    assert recall_with_ties([], np.array([]), scores, 3) == 1.0


def test_rrf_top_agrees_with_the_views_fusion_on_random_lists() -> None:
    rng = random.Random(11)
    for _ in range(200):
        pool = [f"m{i}" for i in range(30)]
        text = rng.sample(pool, rng.randint(0, 20))
        vector = rng.sample(pool, rng.randint(0, 20))
        want = [f.memory_id for f in fuse([Candidate(m, 0.0) for m in text],
                                          [Candidate(m, 0.0) for m in vector], 10)]
        assert rrf_top(text, vector, 10, rrf_k=RRF_K, text_weight=BM25_WEIGHT,
                       vector_weight=VECTOR_WEIGHT) == want
