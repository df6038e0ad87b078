"""The ranking's choices on LoCoMo, made leave-one-conversation-out, and its ablation.

The hybrid ranking has two tuned choices (:class:`memstack.view.search.Ranking`): the share of
the scope's rows above which a term leaves the query, and the share of its neighbours' scores a
row takes. :data:`GRID` crosses a few values of each, including "off" for both, so the same
runs give the ablation (each stage alone and both) and the held-out figure:

for every conversation, the choice with the best mean recall@10 over the *other* conversations'
questions is the one its own questions are scored with (:func:`leave_one_out`). No
conversation's questions influence the choice it is scored with; the product's default
(:data:`memstack.view.search.RANKING`) is reported beside it, and the choice made on all
conversations, to show how far the default is from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from memstack.view.search import FUSED_ONLY, RANKING, Ranking

SHARES: tuple[float | None, ...] = (None, 0.1, 0.2, 0.3)
WEIGHTS: tuple[float, ...] = (0.0, 0.5, 0.75)
GRID: tuple[Ranking, ...] = tuple(Ranking(s, w) for s in SHARES for w in WEIGHTS)
ABLATION: dict[str, Ranking] = {
    "fused_only": FUSED_ONLY,
    "focus_only": Ranking(RANKING.common_share, 0.0),
    "neighbours_only": Ranking(None, RANKING.neighbour_weight),
    "focus_and_neighbours": RANKING,
}
assert all(r in GRID for r in ABLATION.values()), "the ablation's rankings are grid points"


def name(ranking: Ranking) -> str:
    share = "off" if ranking.common_share is None else f"{ranking.common_share:g}"
    return f"share={share},neighbours={ranking.neighbour_weight:g}"


Scores = Mapping[str, Mapping[Ranking, Sequence[float]]]
"""conversation -> ranking -> one score per question (the same questions for every ranking)."""


@dataclass(frozen=True)
class HeldOut:
    """Per conversation, the choice made without it; the mean of every question's score under
    its conversation's choice."""

    chosen: dict[str, Ranking]
    mean: float


def best(scores: Scores, conversations: Sequence[str]) -> Ranking:
    """The ranking with the best mean over the questions of ``conversations`` (ties: the
    earlier grid point)."""
    rankings = list(next(iter(scores.values())))
    means = [float(np.mean([x for c in conversations for x in scores[c][r]])) for r in rankings]
    return rankings[int(np.argmax(means))]


def leave_one_out(scores: Scores) -> HeldOut:
    """Every conversation scored with the ranking chosen on the others."""
    conversations = sorted(scores)
    if len(conversations) < 2:
        raise ValueError("leave-one-out needs at least two conversations")
    chosen = {c: best(scores, [o for o in conversations if o != c]) for c in conversations}
    held = [x for c in conversations for x in scores[c][chosen[c]]]
    return HeldOut(chosen, float(np.mean(held)))
