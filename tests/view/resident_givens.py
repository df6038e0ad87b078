"""Givens of the resident search index's tests: rows, a LanceDB table of them, BM25 by its
pure definition, and an encoder that answers every query with one vector."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from memstack.operators.mutations import MemoryRow
from memstack.pipelines.shards import bm25
from memstack.pipelines.stores.lance_index import LanceVectorIndex

DIM = 16
T0 = datetime(2025, 1, 1, tzinfo=UTC)
V0 = datetime(2024, 1, 1, tzinfo=UTC)
WORDS = ["camping", "lake", "kids", "fish", "grilled", "painting", "sunset", "Porto", "Lisbon",
         "guitar", "concert", "books", "running", "marathon", "paints", "painted", "hikes",
         "hiking", "dog", "cat"]


def row(i: int, tenant: str, text: str, session: str = "s", kind: str = "message") -> MemoryRow:
    return MemoryRow(f"m{i}", f"m{i}", tenant, session, f"who{i % 3}", kind, text,
                     V0 + timedelta(minutes=3 * i), None, T0 + timedelta(hours=i), None,
                     i % 2, i, {})


def rows_of(n: int, seed: int = 4) -> list[MemoryRow]:
    rng = random.Random(seed)
    return [row(i, f"t{i % 2}", " ".join(rng.choices(WORDS, k=rng.randint(3, 12))),
                 session=f"s{i // 50}", kind="message" if i % 4 else "note") for i in range(n)]


def lance_of(tmp_path: Path, held: list[MemoryRow], vectors: np.ndarray[Any, Any],
           batch: int = 100) -> LanceVectorIndex:
    index = LanceVectorIndex(tmp_path / "lance", dim=DIM)
    for lo in range(0, len(held), batch):  # one fragment per batch
        index.merge(held[lo:lo + batch], vectors[lo:lo + batch], maintain=False)
    return index


def bm25_reference(held: list[MemoryRow], tenant: str, query: str, n: int,
               keep: Any = lambda r: True) -> list[bm25.Scored]:
    """BM25 by the pure definition, statistics over the tenant's rows in scope."""
    own = [r for r in held if r.tenant == tenant and keep(r)]
    docs = [Counter(bm25.tokens(r.text)) for r in own]
    terms = bm25.query_terms(query)
    return bm25.rank(bm25.stats_of(docs, terms),
                     bm25.matches_of([r.memory_id for r in own], docs, terms), n)


class FixedEncoder:
    """A fixed encoder: every query is one vector."""

    name, dim = "fixed", DIM

    def __init__(self, vector: np.ndarray[Any, Any]) -> None:
        self.vector = vector

    def encode(self, texts: list[str]) -> np.ndarray[Any, Any]:
        return np.stack([self.vector for _ in texts])


