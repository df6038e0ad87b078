"""BM25 that ranks the same whatever the number of shards (pure).

LanceDB scores full-text matches with the statistics of its own table (row count, mean length,
document frequency of each term). Split over shards, each shard's scores use its own statistics,
so merging per-shard lists by score would rank differently with 1, 3 or 6 shards. The sharded
search therefore scores like a distributed search engine's *DFS* phase: each shard reports its
term statistics (:class:`TermStats`) and its matching rows (:class:`Match`: the term counts and
length of each), the router sums the statistics and scores every match with the global ones
(:func:`rank`). The sums do not depend on how rows are split, so neither do the scores.

Tokens: lower-cased runs of letters and digits, at most 40 characters, English stop words
dropped, no stemming (LanceDB's default stems, so a sharded BM25 ranking is not LanceDB's).
Statistics are over the tenant's rows (all of them, whatever the as-of coordinates), so one
tenant's data never moves another tenant's ranking.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

K1 = 1.2
B = 0.75
MAX_TOKEN = 40
STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is",
    "it", "its", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then",
    "there", "these", "they", "this", "to", "was", "will", "with", "i", "me", "my", "we",
    "our", "you", "your", "he", "him", "his", "she", "her"
})


def tokens(text: str) -> list[str]:
    """The BM25 tokens of ``text`` (see the module docstring)."""
    words = "".join(c.lower() if c.isalnum() else " " for c in text).split()
    return [w for w in words if len(w) <= MAX_TOKEN and w not in STOP_WORDS]


def query_terms(text: str) -> list[str]:
    """The distinct tokens of a query, in first-seen order."""
    return list(dict.fromkeys(tokens(text)))


@dataclass(frozen=True)
class TermStats:
    """One shard's statistics: rows, their summed length, and each query term's row count."""

    docs: int
    length: int
    df: Mapping[str, int]

    @staticmethod
    def total(parts: Iterable[TermStats]) -> TermStats:
        docs, length, df = 0, 0, Counter[str]()
        for part in parts:
            docs += part.docs
            length += part.length
            df.update(part.df)
        return TermStats(docs, length, dict(df))


@dataclass(frozen=True)
class Match:
    """A row matching at least one query term: its id, length and the terms' counts in it."""

    memory_id: str
    length: int
    tf: Mapping[str, int]


@dataclass(frozen=True)
class Scored:
    memory_id: str
    score: float


def stats_of(docs: Sequence[Counter[str]], terms: Sequence[str]) -> TermStats:
    """The statistics of one shard's rows (each row as its token counts)."""
    return TermStats(len(docs), sum(sum(d.values()) for d in docs),
                     {t: sum(1 for d in docs if t in d) for t in terms})


def matches_of(ids: Sequence[str], docs: Sequence[Counter[str]],
               terms: Sequence[str]) -> list[Match]:
    """The rows that contain a query term, with their counts of each."""
    out: list[Match] = []
    for memory_id, doc in zip(ids, docs, strict=True):
        tf = {t: doc[t] for t in terms if t in doc}
        if tf:
            out.append(Match(memory_id, sum(doc.values()), tf))
    return out


def rank(stats: TermStats, matches: Iterable[Match], n: int) -> list[Scored]:
    """The top ``n`` matches by BM25 under ``stats``; ties by memory id."""
    if stats.docs == 0:
        return []
    mean = stats.length / stats.docs or 1.0
    idf = {t: math.log(1 + (stats.docs - df + 0.5) / (df + 0.5)) for t, df in stats.df.items()}
    scored = []
    for match in matches:
        norm = K1 * (1 - B + B * match.length / mean)
        score = sum(idf.get(t, 0.0) * c * (K1 + 1) / (c + norm) for t, c in match.tf.items())
        scored.append(Scored(match.memory_id, score))
    scored.sort(key=lambda s: (-s.score, s.memory_id))
    return scored[:n]
