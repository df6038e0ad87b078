"""Cosine search over the resident vectors: exact while small, then inverted lists (IVF).

Below :data:`FLAT_ROWS` rows every vector is scored (a matrix-vector product). From there the
vectors are clustered (spherical k-means, ``sqrt(rows)`` lists, trained on a sample) and each
list holds its rows' vectors contiguously; a query scores the lists nearest to it, at least
:data:`MIN_PROBE_SHARE` of them and until :data:`ENOUGH` times the rows asked for are in scope,
exactly (no quantisation: the distances are the true cosine distances); at least
:data:`MIN_PROBES` lists are scored. Appended rows join the
nearest list; the lists are trained again once the rows have grown :data:`RETRAIN_GROWTH`-fold.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import numpy.typing as npt

from memstack.view.resident.grow import Grow
from memstack.view.resident.rows import Mask, Positions, best_first

FLAT_ROWS = 20_000
MIN_PROBES = 12
MIN_PROBE_SHARE = 0.03
ENOUGH = 8
RETRAIN_GROWTH = 4
SAMPLE_PER_LIST = 48
ITERATIONS = 6
_CHUNK = 16_384

Matrix = npt.NDArray[np.float32]


def unit(vectors: npt.ArrayLike) -> Matrix:
    """Rows scaled to unit length (a zero row stays zero)."""
    m = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    out: Matrix = m / np.where(norms == 0, 1, norms)
    return out


class VectorLists:
    """Every resident row's unit vector, by position."""

    def __init__(self, dim: int, seed: int = 7) -> None:
        self.dim = dim
        self._rng = np.random.default_rng(seed)
        self._flat: Grow | None = Grow(np.float32, dim)
        self._centroids: Matrix | None = None
        self._lists: list[tuple[Grow, Grow]] = []
        self._trained_rows = 0
        self.rows = 0
        self._list_of = np.empty(0, dtype=np.int32)
        """Per position, the list holding its vector (lists only)."""
        self._slot_of = np.empty(0, dtype=np.int64)
        """Per position, its row in that list."""

    @property
    def lists(self) -> int:
        """Inverted lists (0 while every vector is scored)."""
        return len(self._lists)

    def append(self, positions: Positions, vectors: npt.ArrayLike) -> None:
        """Add the unit vectors of rows appended at ``positions``."""
        vectors = unit(vectors)
        self.rows += len(positions)
        if self._flat is not None:
            if len(positions) and int(positions[0]) != self._flat.n:
                raise ValueError(f"vectors hold {self._flat.n} rows; rows appended at "
                                 f"{int(positions[0])}: the resident index is out of step")
            self._flat.append(vectors)
            if self._flat.n >= FLAT_ROWS:
                self._train(np.arange(self._flat.n, dtype=np.int64), self._flat.view())
            return
        self._assign(positions, vectors)
        if self.rows >= RETRAIN_GROWTH * self._trained_rows:
            self._train(*self._everything())

    def zero(self, positions: Positions) -> None:
        """Zero the vectors of dead rows (a forgotten row's embedding does not stay here)."""
        if self._flat is not None:
            self._flat[positions] = 0.0
            return
        for held, slots, _ in self._by_list(positions):
            self._lists[held][1][slots] = 0.0

    def vectors_at(self, positions: Positions) -> Matrix:
        """The unit vectors held for ``positions`` (zero for a dead row), in that order."""
        if self._flat is not None:
            found: Matrix = self._flat.view()[positions]
            return found
        out: Matrix = np.empty((len(positions), self.dim), dtype=np.float32)
        for held, slots, rows in self._by_list(positions):
            out[rows] = self._lists[held][1].view()[slots]
        return out

    def exact(self, query: npt.ArrayLike, positions: Positions, n: int
              ) -> tuple[Positions, npt.NDArray[np.float32]]:
        """The ``n`` of ``positions`` nearest to ``query``, every one scored (no probing):
        for a scope of few rows, such as a selective metadata filter's."""
        q = unit(np.asarray(query, dtype=np.float32).reshape(-1))
        return _best(positions, self.vectors_at(positions) @ q, n)

    def _by_list(self, positions: Positions) -> list[tuple[int, Positions, Positions]]:
        """``positions`` grouped by the list holding them: ``(list, slots in it, indexes into
        positions)``."""
        if not len(positions):
            return []
        lists, slots = self._list_of[positions], self._slot_of[positions]
        order = np.argsort(lists, kind="stable")
        ordered = lists[order]
        cuts = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(order)]
        return [(int(ordered[a]), slots[order[a:b]], order[a:b])
                for a, b in itertools.pairwise(cuts)]

    def vector_of(self, position: int) -> npt.NDArray[np.float32]:
        """The unit vector held for ``position`` (zero once its row died)."""
        if not 0 <= position < self.rows:
            raise KeyError(f"no vector held for position {position}")
        held: npt.NDArray[np.float32] = self.vectors_at(np.array([position], np.int64))[0]
        return held

    def nearest(self, query: npt.ArrayLike, allowed: Mask, n: int
                ) -> tuple[Positions, npt.NDArray[np.float32]]:
        """The ``n`` positions in scope nearest to ``query`` by cosine, nearest first (ties:
        the earlier position), with their cosine distances."""
        q = unit(np.asarray(query, dtype=np.float32).reshape(-1))
        if self._flat is not None:
            vectors = self._flat.view()
            positions = np.arange(len(vectors), dtype=np.int64)
            keep = allowed(positions)
            return _best(positions[keep], (vectors @ q)[keep], n)
        assert self._centroids is not None
        order = np.argsort(-(self._centroids @ q), kind="stable").tolist()
        least = max(MIN_PROBES, math.ceil(MIN_PROBE_SHARE * len(order)))
        # the lists every search probes, scored together (one scope check, one selection);
        # then one more list at a time until enough rows in scope were scored
        first = [self._lists[i] for i in order[:least]]
        at = np.concatenate([p.view() for p, _ in first])
        keep = allowed(at)
        found = [at[keep]]
        scores = [np.concatenate([v.view() @ q for _, v in first])[keep]]
        kept = len(found[0])
        for i in order[least:]:
            if kept >= ENOUGH * n:
                break
            at, vectors = self._lists[i][0].view(), self._lists[i][1].view()
            keep = allowed(at)
            found.append(at[keep])
            scores.append((vectors @ q)[keep])
            kept += len(found[-1])
        return _best(np.concatenate(found), np.concatenate(scores), n)

    def _everything(self) -> tuple[Positions, Matrix]:
        at = np.concatenate([p.view() for p, _ in self._lists])
        vectors = np.concatenate([v.view() for _, v in self._lists])
        return at, vectors

    def _train(self, positions: Positions, vectors: Matrix) -> None:
        """Cluster ``vectors`` (spherical k-means on a sample) and hold them by list."""
        k = max(2, int(math.sqrt(len(vectors))))
        sample = vectors[self._rng.choice(len(vectors), min(len(vectors), SAMPLE_PER_LIST * k),
                                          replace=False)]
        centroids = sample[self._rng.choice(len(sample), k, replace=False)]
        for _ in range(ITERATIONS):
            nearest = np.argmax(sample @ centroids.T, axis=1)
            sums = np.zeros_like(centroids)
            np.add.at(sums, nearest, sample)
            empty = ~sums.any(axis=1)
            sums[empty] = sample[self._rng.choice(len(sample), int(empty.sum()))]
            centroids = unit(sums)
        self._centroids = centroids
        self._lists = [(Grow(np.int64), Grow(np.float32, self.dim)) for _ in range(k)]
        self._flat = None
        self._trained_rows = len(vectors)
        self._assign(positions, vectors)

    def _assign(self, positions: Positions, vectors: Matrix) -> None:
        assert self._centroids is not None
        for lo in range(0, len(vectors), _CHUNK):
            part = vectors[lo:lo + _CHUNK]
            nearest = np.argmax(part @ self._centroids.T, axis=1)
            chunk = positions[lo:lo + _CHUNK]
            self._room(int(chunk.max()) + 1 if len(chunk) else 0)
            for i in np.unique(nearest).tolist():
                rows = nearest == i
                first = self._lists[i][0].n
                self._lists[i][0].append(chunk[rows])
                self._lists[i][1].append(part[rows])
                self._list_of[chunk[rows]] = i
                self._slot_of[chunk[rows]] = np.arange(first, first + int(rows.sum()))

    def _room(self, size: int) -> None:
        """The locator arrays hold at least ``size`` positions."""
        if size > len(self._list_of):
            grown = max(size, 2 * len(self._list_of))
            self._list_of = np.resize(self._list_of, grown)
            self._slot_of = np.resize(self._slot_of, grown)


def _best(positions: Positions, similarity: npt.NDArray[np.float32], n: int
          ) -> tuple[Positions, npt.NDArray[np.float32]]:
    positions, similarity = best_first(positions, similarity, n)
    distance: npt.NDArray[np.float32] = (1.0 - similarity).astype(np.float32)
    return positions, distance
