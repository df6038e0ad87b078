"""BM25 that ranks the same whatever the number of shards (pure).

LanceDB scores full-text matches with the statistics of its own table (row count, mean length,
document frequency of each term). Split over shards, each shard's scores use its own statistics,
so merging per-shard lists by score would rank differently with 1, 3 or 6 shards. The sharded
search therefore scores like a distributed search engine's *DFS* phase: each shard reports its
term statistics (:class:`TermStats`) and its matching rows (:class:`Match`: the term counts and
length of each), the router sums the statistics and scores every match with the global ones
(:func:`rank`). The sums do not depend on how rows are split, so neither do the scores.

Tokens: lower-cased runs of letters and digits, at most 40 characters, English stop words
(Snowball's list, as LanceDB's) dropped, each word reduced to its English (Porter2) stem as
LanceDB's full-text index does ("paintings", "painted" -> "paint"). The same tokens serve
the resident search index (:mod:`memstack.view.resident`), so one shard and many rank alike.
Statistics are over the tenant's rows in the searched scope (kinds, session, subject; all of
them, whatever the as-of coordinates), so one tenant's data never moves another tenant's
ranking.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy.typing as npt
import snowballstemmer  # type: ignore[import-untyped]  # pure Python, no stubs

Num = float | npt.NDArray[Any]
"""A number, or a numpy array of them."""

K1 = 1.2
B = 0.75
MAX_TOKEN = 40
STOP_WORDS = frozenset({
    "i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours",
    "yourself", "yourselves", "he", "him", "his", "himself", "she", "her", "hers", "herself",
    "it", "its", "itself", "they", "them", "their", "theirs", "themselves", "what", "which",
    "who", "whom", "this", "that", "these", "those", "am", "is", "are", "was", "were", "be",
    "been", "being", "have", "has", "had", "having", "do", "does", "did", "doing", "would",
    "should", "could", "ought", "i'm", "you're", "he's", "she's", "it's", "we're", "they're",
    "i've", "you've", "we've", "they've", "i'd", "you'd", "he'd", "she'd", "we'd", "they'd",
    "i'll", "you'll", "he'll", "she'll", "we'll", "they'll", "isn't", "aren't", "wasn't",
    "weren't", "hasn't", "haven't", "hadn't", "doesn't", "don't", "didn't", "won't", "wouldn't",
    "shan't", "shouldn't", "can't", "cannot", "couldn't", "mustn't", "let's", "that's", "who's",
    "what's", "here's", "there's", "when's", "where's", "why's", "how's", "a", "an", "the", "and",
    "but", "if", "or", "because", "as", "until", "while", "of", "at", "by", "for", "with",
    "about", "against", "between", "into", "through", "during", "before", "after", "above",
    "below", "to", "from", "up", "down", "in", "out", "on", "off", "over", "under", "again",
    "further", "then", "once", "here", "there", "when", "where", "why", "how", "all", "any",
    "both", "each", "few", "more", "most", "other", "some", "such", "no", "nor", "not", "only",
    "own", "same", "so", "than", "too", "very"
})
"""The Snowball project's English stop words (those LanceDB's full-text index drops)."""


_WORD = re.compile(r"[^\W_]+")
r"""A run of letters and digits (``str.isalnum`` characters: ``\w`` less the underscore)."""
_STEMMERS = threading.local()


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """The English (Porter2) stem of a lower-cased ``word`` (cached: a vocabulary repeats).
    A Snowball stemmer holds the word it works on, so each thread has its own."""
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = snowballstemmer.stemmer("english")
    return str(stemmer.stemWord(word))


def tokens(text: str) -> list[str]:
    """The BM25 tokens of ``text`` (see the module docstring). A run of ASCII digits is its
    own stem (Porter2 changes letters only): it skips the stemmer and its cache, which
    numbers (turn counts, ids, amounts) would otherwise fill with one-off entries."""
    words = [w.lower() for w in _WORD.findall(text)]
    return [w if w.isascii() and w.isdigit() else stem(w) for w in words
            if len(w) <= MAX_TOKEN and w not in STOP_WORDS]


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


def idf(docs: int, df: int) -> float:
    """A term's inverse document frequency among ``docs`` rows, ``df`` of which hold it."""
    return math.log(1 + (docs - df + 0.5) / (df + 0.5))


def weight(idf: float, tf: Num, length: Num, mean: float) -> Num:
    """A term's share of a row's score: held ``tf`` times by a row of ``length`` tokens, the
    rows' mean length being ``mean`` (numbers or numpy arrays, element-wise)."""
    return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / mean))


def rank(stats: TermStats, matches: Iterable[Match], n: int) -> list[Scored]:
    """The top ``n`` matches by BM25 under ``stats``; ties by memory id."""
    if stats.docs == 0:
        return []
    mean = stats.length / stats.docs or 1.0
    weights = {t: idf(stats.docs, df) for t, df in stats.df.items()}
    scored = []
    for match in matches:
        score = sum(weight(weights.get(t, 0.0), c, match.length, mean)
                    for t, c in match.tf.items())
        scored.append(Scored(match.memory_id, float(score)))
    scored.sort(key=lambda s: (-s.score, s.memory_id))
    return scored[:n]
