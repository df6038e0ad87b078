"""Exact (brute-force) retrieval: the truth the query benchmark scores the system against.

Nothing here uses the system under test: BM25 is computed from the token ids the generator
drew, cosine from the vectors it drew, each over every row that passes the same filter.

BM25 is the textbook Okapi form with ``k1 = 1.2``, ``b = 0.75`` and
``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, with ``N``, ``df`` and the mean document length
taken over the whole corpus (every tenant, every time), as a search engine's index does; a
query term counts once however often it appears in the query.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

K1 = 1.2
B = 0.75
PAD = -1
"""Token id that fills a row of the token matrix past the row's length."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class ExactBM25:
    """Postings built once from a (rows x max length) token-id matrix padded with ``PAD``."""

    def __init__(self, tokens: npt.NDArray[np.integer[Any]], vocabulary: int) -> None:
        rows, cols = np.nonzero(tokens != PAD)
        terms = tokens[rows, cols].astype(np.int64)
        self.rows = tokens.shape[0]
        self.lengths: FloatArray = np.bincount(rows, minlength=self.rows).astype(np.float64)
        self.mean_length = float(self.lengths.mean()) if self.rows else 0.0
        pairs, tf = np.unique(terms * self.rows + rows, return_counts=True)
        self._term = pairs // self.rows
        self._doc = pairs % self.rows
        self._tf = tf.astype(np.float64)
        self._start = np.searchsorted(self._term, np.arange(vocabulary + 1))
        df = np.diff(self._start).astype(np.float64)
        self.idf: FloatArray = np.log(1.0 + (self.rows - df + 0.5) / (df + 0.5))

    def scores(self, query: Sequence[int]) -> FloatArray:
        """The BM25 score of every row for the query's distinct term ids (0 where none)."""
        out = np.zeros(self.rows, dtype=np.float64)
        for term in sorted(set(query)):
            if not 0 <= term < len(self.idf):
                continue
            lo, hi = self._start[term], self._start[term + 1]
            docs, tf = self._doc[lo:hi], self._tf[lo:hi]
            norm = K1 * (1.0 - B + B * self.lengths[docs] / self.mean_length)
            out[docs] += self.idf[term] * tf * (K1 + 1.0) / (tf + norm)
        return out

    def top(self, query: Sequence[int], allowed: BoolArray, n: int) -> tuple[IntArray,
                                                                            FloatArray]:
        """The ``n`` best allowed rows with a positive score, best first (ties: lower row)."""
        scores = self.scores(query)
        idx = np.flatnonzero(allowed & (scores > 0))
        order = np.lexsort((idx, -scores[idx]))[:n]
        return idx[order], scores[idx[order]]


def tokenize(text: str, vocabulary: dict[str, int]) -> list[int]:
    """Lower-cased alphanumeric runs, as ids (words outside ``vocabulary`` are dropped)."""
    return [vocabulary[w] for w in re.findall(r"[0-9a-z]+", text.lower()) if w in vocabulary]


def exact_cosine(vectors: npt.NDArray[np.float32], query: npt.NDArray[np.float32],
                 allowed: BoolArray, n: int) -> IntArray:
    """The ``n`` allowed rows of highest cosine to ``query``, best first (ties: lower row)."""
    idx = np.flatnonzero(allowed)
    norms = np.linalg.norm(vectors[idx], axis=1) * float(np.linalg.norm(query))
    sims = (vectors[idx] @ query) / np.where(norms > 0, norms, 1.0)
    order = np.lexsort((idx, -sims))[:n]
    out: IntArray = idx[order]
    return out


def recall_with_ties(got: Sequence[int], truth_scores: FloatArray, all_scores: FloatArray,
                     k: int, tolerance: float = 1e-4) -> float:
    """Share of the top ``k`` found, where any row scoring as well as the exact ``k``-th counts.

    BM25 gives many rows the same score; which of them fill the last places is arbitrary, so a
    hit is right when its exact score reaches the exact ``k``-th best (within a float32
    tolerance). ``truth_scores`` are the exact top scores, best first.
    """
    if len(truth_scores) == 0:
        return 1.0 if not got else 0.0
    bar = truth_scores[min(k, len(truth_scores)) - 1]
    good = sum(1 for row in list(got)[:k] if all_scores[row] >= bar - tolerance * abs(bar))
    return good / min(k, len(truth_scores))


def rrf_top(text_ids: Sequence[str], vector_ids: Sequence[str], k: int, *, rrf_k: int,
            text_weight: float, vector_weight: float) -> list[str]:
    """Weighted reciprocal rank fusion of two ranked id lists, top ``k`` (ties: best single
    rank, then id): the fusion the system documents, written out again for the truth."""
    score: dict[str, float] = {}
    best: dict[str, int] = {}
    for ids, weight in ((text_ids, text_weight), (vector_ids, vector_weight)):
        seen: set[str] = set()
        for rank, memory_id in enumerate(ids, start=1):
            if memory_id in seen:
                continue
            seen.add(memory_id)
            score[memory_id] = score.get(memory_id, 0.0) + weight / (rrf_k + rank)
            best[memory_id] = min(best.get(memory_id, rank), rank)
    return sorted(score, key=lambda m: (-score[m], best[m], m))[:k]
