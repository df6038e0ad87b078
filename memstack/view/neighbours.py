"""Neighbour context: a row's score takes a share of the scores of the rows around it.

The evidence for a question is often the turn after the one that matches it: "How was the trip
with your kids?" matches the question's words, "We went camping, they loved it" holds the
answer. So after fusion a row's score becomes

    score + NEIGHBOUR_WEIGHT * (sum of the scores 1 row away + NEAR_DECAY * those 2 rows away)

where "away" counts rows of the same session, in valid-time order, that answer the same query
scope and lie within :data:`WINDOW` of it (a gap longer than that ends the conversation
around a row). Rows next to the best candidates join the candidates this way even when neither
retriever ranked them. The weights were chosen leave-one-conversation-out on LoCoMo
(docs/queries.md, "Ablation"); every held-out choice was the same.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

NEIGHBOUR_WEIGHT = 0.5
NEAR_DECAY = 0.5
REACH = 2
"""How many rows on each side of a row share its score."""
WINDOW = timedelta(minutes=10)
"""Rows further apart in valid time than this are not neighbours."""


@dataclass(frozen=True)
class Placed:
    """Where a row lies: its session and valid time (ties broken by the id)."""

    memory_id: str
    session: str
    at: datetime


def spread(scores: Mapping[str, float], rows: Sequence[Placed], *,
           weight: float = NEIGHBOUR_WEIGHT, decay: float = NEAR_DECAY,
           reach: int = REACH, window: timedelta = WINDOW) -> dict[str, float]:
    """The scores of ``rows`` (every row placed; a row without a score counts 0) after each
    takes ``weight`` of its neighbours' scores. Rows of ``scores`` that were not placed keep
    their own score."""
    by_session: dict[str, list[Placed]] = defaultdict(list)
    for row in {r.memory_id: r for r in rows}.values():
        by_session[row.session].append(row)
    out = dict(scores)
    for placed in by_session.values():
        placed.sort(key=lambda r: (r.at, r.memory_id))
        own = [scores.get(r.memory_id, 0.0) for r in placed]
        for i, row in enumerate(placed):
            near = 0.0
            for step in range(1, reach + 1):
                share = decay ** (step - 1)
                for j in (i - step, i + step):
                    if 0 <= j < len(placed) and _within(placed, i, j, window):
                        near += share * own[j]
            if near > 0.0 or row.memory_id in scores:
                out[row.memory_id] = own[i] + weight * near
    return out


def _within(placed: Sequence[Placed], i: int, j: int, window: timedelta) -> bool:
    """Whether no gap between consecutive rows from ``i`` to ``j`` is longer than ``window``."""
    lo, hi = min(i, j), max(i, j)
    return all(placed[n + 1].at - placed[n].at <= window for n in range(lo, hi))
