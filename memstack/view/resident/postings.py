"""BM25 over the resident rows: an inverted index of positions, scored with numpy.

Tokens, the formula and its constants are :mod:`memstack.pipelines.shards.bm25`'s (the same
the sharded router ranks with). Statistics are the searched scope's live rows (the tenant, and
the kinds, session and subject asked for: row count, summed length, each term's row count),
whatever the as-of coordinates, as there. Over LoCoMo (questions searched in their
conversation) the scope's statistics found more evidence than the tenant's: BM25 recall@10
0.632 against 0.610, measured with a pure reference before this index was built.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from memstack.pipelines.shards import bm25
from memstack.view.resident.grow import Grow
from memstack.view.resident.rows import Mask, Positions


class Postings:
    """term -> (positions, counts); every position's length; per tenant code, the live rows'
    count and summed length."""

    def __init__(self) -> None:
        self._terms: dict[str, tuple[Grow, Grow]] = {}
        self.length = Grow(np.int32)
        self._docs: defaultdict[int, int] = defaultdict(int)
        self._total: defaultdict[int, int] = defaultdict(int)

    def append(self, positions: Positions, texts: Sequence[str], tenants: Sequence[int]) -> None:
        """Index the rows appended at ``positions`` (consecutive, from :attr:`length`'s end)."""
        if len(positions) and int(positions[0]) != self.length.n:
            raise ValueError(f"postings hold {self.length.n} rows; rows appended at "
                             f"{int(positions[0])}: the resident index is out of step")
        batch: defaultdict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        lengths = []
        for position, text, tenant in zip(positions.tolist(), texts, tenants, strict=True):
            words = bm25.tokens(text)
            lengths.append(len(words))
            self._docs[tenant] += 1
            self._total[tenant] += len(words)
            for term, count in Counter(words).items():
                at, tf = batch[term]
                at.append(position)
                tf.append(count)
        self.length.append(lengths)
        for term, (at, tf) in batch.items():
            held = self._terms.get(term)
            if held is None:
                held = self._terms[term] = (Grow(np.int64, capacity=8), Grow(np.int32, capacity=8))
            held[0].append(at)
            held[1].append(tf)

    def forget(self, positions: Positions, tenants: npt.NDArray[np.int32],
               texts: Sequence[str]) -> None:
        """Rows that died (``texts``: theirs): out of their tenant's statistics, and out of
        the postings of their terms (no term keeps a trace of a forgotten row)."""
        lengths = self.length.view()[positions]
        dead: defaultdict[str, list[int]] = defaultdict(list)
        for position, tenant, length, text in zip(positions.tolist(), tenants.tolist(),
                                                  lengths.tolist(), texts, strict=True):
            self._docs[tenant] -= 1
            self._total[tenant] -= length
            for term in set(bm25.tokens(text)):
                dead[term].append(position)
        for term, gone in dead.items():
            held = self._terms.get(term)
            if held is None:
                continue
            at, tf = held[0].view(), held[1].view()
            keep = ~np.isin(at, np.asarray(gone, dtype=np.int64))
            if keep.all():
                continue
            if not keep.any():
                del self._terms[term]
                continue
            fresh = (Grow(np.int64, capacity=8), Grow(np.int32, capacity=8))
            fresh[0].append(at[keep])
            fresh[1].append(tf[keep])
            self._terms[term] = fresh

    def holding(self, positions: Positions) -> set[str]:
        """The terms whose postings hold any of ``positions`` (a scan of every term)."""
        return {t for t, (at, _) in self._terms.items() if np.isin(at.view(), positions).any()}

    def tenant(self, tenant: int) -> tuple[int, int]:
        """The tenant's live rows: how many, and their summed length."""
        return self._docs.get(tenant, 0), self._total.get(tenant, 0)

    def top(self, terms: Sequence[str], universe: tuple[int, int], scope: Mask, n: int
            ) -> tuple[Positions, npt.NDArray[np.float64]]:
        """The ``n`` best positions in ``scope`` (its tenant's live rows in scope) for the
        query ``terms`` (its tokens), best first (ties: the earlier position), with their
        scores. ``universe``: the scope's row count and summed length; a term's row count is
        counted in the scope too."""
        docs, total = universe
        if docs <= 0:
            return np.empty(0, np.int64), np.empty(0)
        mean = total / docs or 1.0
        lengths = self.length.view()
        found: list[Positions] = []
        shares: list[npt.NDArray[np.float64]] = []
        for term in dict.fromkeys(terms):
            held = self._terms.get(term)
            if held is None:
                continue
            at, tf = held[0].view(), held[1].view()
            keep = scope(at)
            df = int(keep.sum())
            if not df:
                continue
            at, tf = at[keep], tf[keep]
            found.append(at)
            shares.append(np.asarray(bm25.weight(bm25.idf(docs, df), tf.astype(np.float64),
                                                 lengths[at].astype(np.float64), mean)))
        if not found:
            return np.empty(0, np.int64), np.empty(0)
        at, weights = np.concatenate(found), np.concatenate(shares)
        if 16 * len(at) > self.length.n:  # many matches: one dense sum, no sort
            dense = np.bincount(at, weights=weights, minlength=self.length.n)
            rows = np.flatnonzero(dense)
            scores = dense[rows]
        else:
            rows, inverse = np.unique(at, return_inverse=True)
            scores = np.bincount(inverse, weights=weights, minlength=len(rows))
        if len(rows) > n:
            best = np.argpartition(-scores, n - 1)[:n]
            rows, scores = rows[best], scores[best]
        order = np.lexsort((rows, -scores))
        return rows[order], scores[order]
