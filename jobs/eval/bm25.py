"""Okapi BM25 over a small corpus: the lexical baseline of ``eval openproblems``.

``k1 = 1.2``, ``b = 0.75``, ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``; tokens are lower-cased
runs of word characters. Enough for a few hundred turns per conversation; the product's own
full-text search is LanceDB's (``memstack eval locomo`` measures that one).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_TOKEN = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class BM25:
    """Scores every document of ``docs`` for a query; ``rank`` gives the best first."""

    def __init__(self, docs: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.terms = [Counter(tokens(d)) for d in docs]
        self.lengths = [sum(t.values()) for t in self.terms]
        self.avg = sum(self.lengths) / len(docs) if docs else 0.0
        df: Counter[str] = Counter()
        for t in self.terms:
            df.update(t.keys())
        n = len(docs)
        self.idf = {w: math.log(1.0 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def scores(self, query: str) -> list[float]:
        words = [w for w in tokens(query) if w in self.idf]
        out = []
        for terms, length in zip(self.terms, self.lengths, strict=True):
            norm = self.k1 * (1 - self.b + self.b * length / self.avg) if self.avg else self.k1
            out.append(sum(self.idf[w] * terms[w] * (self.k1 + 1) / (terms[w] + norm)
                           for w in words if w in terms))
        return out

    def rank(self, query: str, k: int) -> list[int]:
        """Indices of the ``k`` best documents (ties: the earlier document first)."""
        s = self.scores(query)
        return sorted(range(len(s)), key=lambda i: (-s[i], i))[:k]
