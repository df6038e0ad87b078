"""A hybrid search over the resident index (:mod:`memstack.view.resident.ranked`, in positions)
ranks as the rules say, on a real LanceDB table.

The oracle takes the same two legs (each checked against its own reference in
``test_resident_search.py`` and ``test_resident_bm25.py``), fuses them with
:func:`~memstack.view.fusion.fuse`, places the neighbours by reading the whole table and
applying the rule by hand (same tenant, scope and session, within the window of a best row,
answering as of), spreads with :func:`~memstack.view.neighbours.spread` and keeps the best
``k`` by score, then id. Many rows share a valid time, so their order by log position is
exercised; rows are known in an order unrelated to their valid time, so a past known time
leaves gaps among neighbours.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstack.operators.mutations import MemoryRow
from memstack.pipelines.stores.bundle import Stores
from memstack.view import MemoryView
from memstack.view import asof as A
from memstack.view.fusion import Candidate, fuse
from memstack.view.memory_view import CANDIDATE_FACTOR, MIN_CANDIDATES
from memstack.view.neighbours import WINDOW, Placed, Placements, spread
from memstack.view.resident import Scope, resident_of
from memstack.view.resident.legs import legs
from memstack.view.search import RANKING
from tests.view.resident_givens import FixedEncoder

DIM = 8
T0 = datetime(2025, 1, 1, tzinfo=UTC)
V0 = datetime(2024, 1, 1, tzinfo=UTC)
WORDS = ["camping", "lake", "kids", "fish", "grilled", "painting", "sunset", "Porto",
         "guitar", "concert", "books", "running", "dog", "cat"]


def _rows(n: int) -> list[MemoryRow]:
    rng = random.Random(3)
    out = []
    for i in range(n):
        name = f"ev-{rng.randrange(10**6):06d}-{i}"  # ids in no order of time or position
        valid = V0 + timedelta(minutes=4 * (i // 5))  # five rows share each valid time
        out.append(MemoryRow(name, name, f"t{i % 2}", f"s{i // 60}", f"who{i % 3}", "message",
                             " ".join(rng.choices(WORDS, k=rng.randint(2, 8))), valid, None,
                             T0 + timedelta(hours=rng.randrange(n)), None, 0, i, {}))
    return out


ROWS = _rows(600)
VECTORS = np.random.default_rng(9).standard_normal((600, DIM)).astype(np.float32)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("ranked") / "stores"
    with Stores.open(directory, dim=DIM) as stores:
        for lo in range(0, len(ROWS), 100):
            stores.vectors.merge(ROWS[lo:lo + 100], VECTORS[lo:lo + 100], maintain=False)
    return directory


def _oracle(view: Any, stores: Stores, query: str, k: int, session: str | None
            ) -> list[tuple[str, float]]:
    index = resident_of(stores.vectors)
    assert index is not None
    n = max(MIN_CANDIDATES, CANDIDATE_FACTOR * k)
    where = view._scope_clauses(None, session, None)
    by_text, by_vector = legs(view, index, query, where, Scope(session=session), "hybrid",
                              RANKING, n)
    assert by_text is not None and by_vector is not None
    fused = fuse(*[[Candidate(m, float(s)) for m, s in zip(index.ids_at(at), scores.tolist(),
                                                           strict=True)]
                   for at, scores in (by_text, by_vector)], 2 * n)
    table = stores.vectors.scan()
    table = table.filter(A.memory_mask(table, view.as_of))
    every = [Placed(m, s, t.replace(tzinfo=UTC) if t.tzinfo is None else t, p, o)
             for m, s, t, p, o, tenant in zip(*(table.column(c).to_pylist() for c in (
                 "memory_id", "session", "vt_from", "partition", "offset", "tenant")),
                 strict=True)
             if tenant == view.tenant and (session is None or s == session)]
    by_id = {p.memory_id: p for p in every}
    around = [by_id[f.memory_id] for f in fused[:k]]
    near = [p for p in every if any(p.session == a.session and abs(p.at - a.at) <= WINDOW
                                    for a in around)]
    scores = spread({f.memory_id: f.score.fused for f in fused},
                    Placements.of(near).plus(Placements.of(around)),
                    weight=RANKING.neighbour_weight)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]


@pytest.mark.parametrize("at", [{}, {"known": T0 + timedelta(hours=300)}],
                         ids=["now", "past-known"])
@pytest.mark.parametrize("session", [None, "s3"])
def test_a_hybrid_search_ranks_as_the_rules_say(written: Path, at: dict[str, Any],
                                               session: str | None) -> None:
    checked = 0
    with Stores.open(written, read_only=True, dim=DIM) as stores:
        for q, query in enumerate(["kids camping lake", "guitar concert", "Porto sunset dog",
                                   "books"]):
            view = MemoryView("t0", stores, encoder=FixedEncoder(VECTORS[7 * q + 1])).as_of(**at)
            got = view.search(query, 10, session=session)
            want = _oracle(view, stores, query, 10, session)
            assert [h.memory.memory_id for h in got] == [m for m, _ in want]
            assert [h.score.fused for h in got] == pytest.approx([s for _, s in want])
            assert all(h.memory.tenant == "t0" for h in got)
            checked += sum(1 for h in got if h.score.neighbours)
    assert checked  # some hits owe their place to neighbours


def test_the_oracle_sees_a_broken_tie_break(written: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    """The check above fails when the resident form orders rows of one time by position
    in the copy reversed instead of by log position (a negative control for the oracle)."""
    import memstack.view.resident.ranked as ranked

    def reversed_order(*args: Any, **kwargs: Any) -> Any:
        scored, scores, rows, sessions, times, partitions, _ = args
        return original(scored, scores, rows, sessions, times, partitions, -rows, **kwargs)

    original = ranked.spread_held
    monkeypatch.setattr(ranked, "spread_held", reversed_order)
    with Stores.open(written, read_only=True, dim=DIM) as stores:
        differ = 0
        for q, query in enumerate(["kids camping lake", "guitar concert", "Porto sunset dog"]):
            view = MemoryView("t0", stores, encoder=FixedEncoder(VECTORS[7 * q + 1])).as_of()
            got = [(h.memory.memory_id, h.score.fused) for h in view.search(query, 10)]
            want = _oracle(view, stores, query, 10, None)
            differ += [m for m, _ in got] != [m for m, _ in want] or not all(
                g == pytest.approx(w) for (_, g), (_, w) in zip(got, want, strict=True))
    assert differ
