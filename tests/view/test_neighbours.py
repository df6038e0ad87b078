"""Neighbour context: each row takes a share of the scores around it (pure logic)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstack.view.neighbours import (
    NEAR_DECAY,
    NEIGHBOUR_WEIGHT,
    WINDOW,
    Placed,
    spread,
    spread_held,
)

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def _turns(session: str, n: int, gap: timedelta = timedelta(seconds=30),
           start: datetime = T0) -> list[Placed]:
    return [Placed(f"{session}-{i}", session, start + i * gap, 0, i) for i in range(n)]


def test_the_turn_after_a_match_joins_with_a_share_of_its_score() -> None:
    rows = _turns("s", 5)
    out = spread({"s-2": 1.0}, rows)
    assert out["s-2"] == pytest.approx(1.0)
    assert out["s-1"] == out["s-3"] == pytest.approx(NEIGHBOUR_WEIGHT)
    assert out["s-0"] == out["s-4"] == pytest.approx(NEIGHBOUR_WEIGHT * NEAR_DECAY)


def test_scores_add_up_from_both_sides() -> None:
    rows = _turns("s", 3)
    out = spread({"s-0": 1.0, "s-2": 2.0}, rows)
    assert out["s-1"] == pytest.approx(NEIGHBOUR_WEIGHT * 3.0)
    assert out["s-0"] == pytest.approx(1.0 + NEIGHBOUR_WEIGHT * NEAR_DECAY * 2.0)


def test_no_share_across_sessions_or_a_gap_longer_than_the_window() -> None:
    rows = [*_turns("a", 2), *_turns("b", 2)]
    rows.append(Placed("a-late", "a", T0 + timedelta(seconds=30) + WINDOW + timedelta(seconds=1),
                       0, 99))
    out = spread({"a-1": 1.0}, rows)
    assert out["a-0"] == pytest.approx(NEIGHBOUR_WEIGHT)
    assert "b-0" not in out and "b-1" not in out
    assert "a-late" not in out


def test_order_is_by_valid_time_not_by_input_order() -> None:
    rows = list(reversed(_turns("s", 3)))
    assert spread({"s-0": 1.0}, rows)["s-1"] == pytest.approx(NEIGHBOUR_WEIGHT)


def test_rows_of_one_time_follow_each_other_in_log_order() -> None:
    """Turns logged at the same valid time are neighbours in the order they were logged
    (partition, then offset), whatever their ids or the input's order."""
    rows = [Placed("zz", "s", T0, 0, 7), Placed("mm", "s", T0, 1, 2), Placed("aa", "s", T0, 0, 9)]
    out = spread({"zz": 1.0}, rows)  # log order: zz (0, 7), aa (0, 9), mm (1, 2)
    assert out["aa"] == pytest.approx(NEIGHBOUR_WEIGHT)
    assert out["mm"] == pytest.approx(NEIGHBOUR_WEIGHT * NEAR_DECAY)


def test_rows_not_placed_keep_their_score() -> None:
    assert spread({"elsewhere": 0.7}, _turns("s", 2)) == {"elsewhere": 0.7}


def _reference(scores: dict[str, float], rows: list[Placed], weight: float = NEIGHBOUR_WEIGHT,
               decay: float = NEAR_DECAY, reach: int = 2,
               window: timedelta = WINDOW) -> dict[str, float]:
    """The rule row by row, as written before it was vectorised (the oracle)."""
    by_session: dict[str, list[Placed]] = {}
    for row in {r.memory_id: r for r in rows}.values():
        by_session.setdefault(row.session, []).append(row)
    out = dict(scores)
    for placed in by_session.values():
        placed.sort(key=lambda r: (r.at, r.partition, r.offset))
        own = [scores.get(r.memory_id, 0.0) for r in placed]
        for i, row in enumerate(placed):
            near = 0.0
            for step in range(1, reach + 1):
                for j in (i - step, i + step):
                    lo, hi = min(i, j), max(i, j)
                    if 0 <= j < len(placed) and all(
                            placed[n + 1].at - placed[n].at <= window for n in range(lo, hi)):
                        near += decay ** (step - 1) * own[j]
            if near > 0.0 or row.memory_id in scores:
                out[row.memory_id] = own[i] + weight * near
    return out


def test_the_vectorised_rule_is_the_rule_row_by_row() -> None:
    import random

    rng = random.Random(11)
    for _ in range(300):
        coarse = rng.random() < 0.5  # whole minutes: rows share times, log order decides
        rows = [Placed(f"m{rng.randrange(40)}", rng.choice("abc"),
                       T0 + (timedelta(minutes=rng.randrange(30)) if coarse else timedelta(
                           minutes=rng.choice([0, 1, 4, 9, 10, 11, 25]) * rng.random()
                           + rng.randrange(60))), rng.randrange(2), offset)
                for offset in rng.sample(range(1000), rng.randrange(1, 30))]
        scores = {f"m{rng.randrange(45)}": rng.random() for _ in range(rng.randrange(0, 8))}
        got, want = spread(scores, rows), _reference(scores, rows)
        assert got.keys() == want.keys()
        assert all(got[k] == pytest.approx(want[k]) for k in want)


def test_the_held_form_is_the_rule_over_positions() -> None:
    """:func:`spread_held` (positions, codes, numpy) returns what :func:`spread` returns for
    the same rows named by their ids, rows of one time in log order in both."""
    import random

    import numpy as np

    rng = random.Random(7)
    for _ in range(400):
        count = rng.randrange(0, 40)
        positions = sorted(rng.sample(range(200), count))
        names = {p: f"id-{rng.randrange(10**6):06d}-{p}" for p in range(200)}
        coarse = rng.random() < 0.5  # whole minutes: many rows share a time
        offsets = rng.sample(range(10_000), count)
        placed = {p: (rng.randrange(3), rng.randrange(30) * 60_000_000 if coarse
                      else rng.randrange(40 * 60_000_000), rng.randrange(2), offsets[i])
                  for i, p in enumerate(positions)}
        scored = rng.sample(range(200), rng.randrange(0, 10))
        weights = [rng.random() for _ in scored]
        rows = np.array(positions, dtype=np.int64)
        got_at, got = spread_held(
            np.array(scored, dtype=np.int64), np.array(weights), rows,
            *(np.array([placed[p][c] for p in positions], dtype=np.int64) for c in range(4)))
        want = spread({names[p]: w for p, w in zip(scored, weights, strict=True)},
                      [Placed(names[p], f"s{placed[p][0]}",
                              datetime.fromtimestamp(placed[p][1] / 1e6, UTC), placed[p][2],
                              placed[p][3])
                       for p in positions])
        assert sorted(names[p] for p in got_at.tolist()) == sorted(want)
        for p, score in zip(got_at.tolist(), got.tolist(), strict=True):
            assert score == pytest.approx(want[names[p]])
