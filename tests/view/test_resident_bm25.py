"""The resident index's BM25 leg (:class:`memstack.view.resident.postings.Postings`) against
BM25's pure definition (:func:`memstack.pipelines.shards.bm25.rank` over the tenant's rows in
scope as token counts, the statistics theirs), on real LanceDB tables over several fragments:
with MaxScore's pruning of common terms, and with a tenant's term counts kept up as lists
grow and shrink."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstack.pipelines.shards import bm25
from memstack.view.resident import Scope, resident_of
from memstack.view.resident.postings import Postings
from tests.view.resident_givens import DIM, WORDS, bm25_reference, lance_of, row, rows_of


def test_the_bm25_leg_ranks_as_the_reference(tmp_path: Path) -> None:
    rows = rows_of(600)
    index = lance_of(tmp_path, rows, np.ones((600, DIM), np.float32))
    resident = resident_of(index)
    assert resident is not None
    rng = random.Random(8)
    for _ in range(40):
        query = " ".join(rng.sample(WORDS, 3)) + " the"
        for tenant, scope, keep in (
                ("t0", Scope(), lambda r: True),
                ("t1", Scope(session="s3"), lambda r: r.session == "s3"),
                ("t0", Scope(kinds=frozenset({"note"})), lambda r: r.kind == "note")):
            got = resident.text_candidates(query, tenant, scope, 25)
            want = bm25_reference(rows, tenant, query, 25, keep)
            scores = got.column("score").to_pylist()
            assert scores == pytest.approx([s.score for s in want], rel=1e-5)
            assert set(got.column("tenant").to_pylist()) <= {tenant}
            # the same rows: every row scored above the last one's score (tied rows at the
            # cut may be either)
            cut = want[-1].score + 1e-4 if want else 0.0
            assert {m for m, s in zip(got.column("memory_id").to_pylist(), scores,
                                      strict=True) if s > cut} == \
                {s.memory_id for s in want if s.score > cut}


def test_the_bm25_leg_prunes_common_terms_and_still_ranks_as_the_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A query with a term every row holds (idf ~0) and rarer ones: the common term is looked
    up only for the rows that can still reach the top (MaxScore), and the ranking and scores
    are the reference's, as without the pruning."""
    rng = random.Random(11)
    rows = [row(i, "t0", " ".join(["says", *rng.choices(WORDS, k=rng.randint(2, 9))]))
            for i in range(3000)]
    index = lance_of(tmp_path, rows, np.ones((3000, DIM), np.float32), batch=500)
    resident = resident_of(index)
    assert resident is not None
    looked: list[int] = []
    real = Postings._looked_up

    def counted(self: Postings, part: Any, at: Any, mean: float) -> Any:
        looked.append(len(at))
        return real(self, part, at, mean)

    monkeypatch.setattr(Postings, "_looked_up", counted)
    for query in ("says camping Porto", "says marathon guitar cat", "say lake"):
        for n in (5, 25, 60):
            got = resident.text_candidates(query, "t0", Scope(), n)
            want = bm25_reference(rows, "t0", query, n)
            scores = got.column("score").to_pylist()
            assert scores == pytest.approx([s.score for s in want], rel=1e-6)  # float32
            cut = want[-1].score + 1e-4
            assert {m for m, s in zip(got.column("memory_id").to_pylist(), scores,
                                      strict=True) if s > cut} == \
                {s.memory_id for s in want if s.score > cut}
    assert looked and max(looked) < 3000  # pruned: the common term read for a few rows only


def test_a_tenant_wide_bm25_counts_each_term_as_a_masked_scan_does() -> None:
    """:meth:`Postings.top` given the tenant (its term counts kept up as lists grow, lists
    held by the tenant alone not masked) ranks as the masked scan of every list, over two
    tenants, batches appended between queries, a term held by one tenant alone and a
    forget that shrinks lists."""
    rng = random.Random(5)
    postings = Postings()
    tenant_of = np.empty(0, np.int32)
    texts: list[str] = []
    alive = np.empty(0, bool)

    def both(query: str, tenant: int, n: int) -> tuple[Any, Any]:
        live = np.flatnonzero(alive & (tenant_of == tenant))
        universe = (len(live), int(postings.length.view()[live].sum()))

        def mask(at: Any) -> Any:
            return (tenant_of[at] == tenant) & alive[at]

        terms = bm25.tokens(query)
        return (postings.top(terms, universe, mask, n, (tenant, tenant_of)),
                postings.top(terms, universe, mask, n))

    checked = 0
    for batch in range(6):
        start = len(texts)
        fresh = [" ".join(["says", *rng.choices(WORDS, k=rng.randint(2, 8))])
                 + (" zebra" if batch % 2 else "") for _ in range(300)]
        owners = np.asarray([rng.randrange(2) if batch % 3 else 0 for _ in fresh], np.int32)
        texts += fresh
        tenant_of = np.concatenate([tenant_of, owners])
        alive = np.concatenate([alive, np.ones(len(fresh), bool)])
        postings.append(np.arange(start, len(texts), dtype=np.int64), fresh, owners.tolist())
        if batch == 4:  # a forget: rows leave their lists
            dead = np.asarray(rng.sample(range(len(texts)), 200), np.int64)
            alive[dead] = False
            postings.forget(dead, tenant_of[dead], [texts[i] for i in dead.tolist()])
        for query in ("says camping Porto", "zebra kids", "says marathon cat", "lake"):
            for tenant in (0, 1):
                (got_at, got), (want_at, want) = both(query, tenant, 25)
                assert got_at.tolist() == want_at.tolist()
                assert got.tolist() == pytest.approx(want.tolist())
                checked += len(got_at)
    assert checked
