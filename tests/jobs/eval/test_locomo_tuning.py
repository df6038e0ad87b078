"""The leave-one-conversation-out choice of the ranking (pure logic)."""

from __future__ import annotations

import pytest

from memstack.jobs.eval.locomo_tuning import ABLATION, GRID, best, leave_one_out, name
from memstack.view.search import FUSED_ONLY, RANKING, Ranking

A, B = Ranking(None, 0.0), Ranking(0.2, 0.5)


def test_each_conversation_is_scored_with_the_choice_of_the_others() -> None:
    scores = {"c1": {A: [1.0], B: [0.0]},    # c1 alone prefers A
              "c2": {A: [0.0], B: [1.0]},
              "c3": {A: [0.0], B: [1.0]},
              "c4": {A: [0.0], B: [1.0]}}
    held = leave_one_out(scores)
    assert held.chosen == {"c1": B, "c2": B, "c3": B, "c4": B}
    assert held.mean == pytest.approx((0 + 1 + 1 + 1) / 4)   # c1 gets no say in its own


def test_no_conversation_influences_its_own_choice() -> None:
    base = {"c1": {A: [0.5], B: [0.4]}, "c2": {A: [0.6], B: [0.5]}, "c3": {A: [0.2], B: [0.9]}}
    chosen = leave_one_out(base).chosen
    for held in base:
        for extreme in ([0.0], [1.0]):
            for ranking in (A, B):
                changed = {c: dict(r) for c, r in base.items()}
                changed[held][ranking] = extreme
                assert leave_one_out(changed).chosen[held] == chosen[held]


def test_best_weights_every_question_and_breaks_ties_by_grid_order() -> None:
    scores = {"c1": {A: [1.0, 1.0, 1.0], B: [0.0, 0.0, 0.0]}, "c2": {A: [0.0], B: [1.0]}}
    assert best(scores, ["c1", "c2"]) == A       # 3 questions outweigh 1
    assert best({"c": {A: [0.5], B: [0.5]}}, ["c"]) == A


def test_one_conversation_cannot_be_held_out() -> None:
    with pytest.raises(ValueError, match="two conversations"):
        leave_one_out({"c1": {A: [1.0]}})


def test_the_grid_holds_the_default_the_baseline_and_the_ablation() -> None:
    assert RANKING in GRID and FUSED_ONLY in GRID
    assert set(ABLATION.values()) <= set(GRID)
    assert len({name(r) for r in GRID}) == len(GRID)
