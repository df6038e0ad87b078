"""The peers bench's figures, from what each side did (pure: tested by hand).

Every side is scored by the same oracle, ``eval locomo``'s evidence recall@k
(:func:`memstack.jobs.eval.locomo.recall`), on the same questions. Mem0 runs in more than one
configuration; its headline figures (``mem0_*``) are its best per figure (the highest recall,
the highest ingest rate, the lowest latency), so memstack's goals are held against the best
Mem0 reached here on each, and the per-configuration figures are reported beside them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memstack.jobs.bench.peers.sides import Side
from memstack.jobs.eval.locomo import KS, Retrieved, recall
from memstack.jobs.eval.locomo_data import Question

OURS = "memstack"
PEER = "mem0"
GOALS: dict[str, tuple[str, float]] = {
    "recall_lead@10": (">=", 0.2),
    "ingest_ratio": (">=", 5.0),
    "search_p50_ratio": ("<=", 1.0),
}
"""The bench's goals: memstack recall@10 at least 0.2 above Mem0's, ingest at least 5x Mem0's
turns/s, search p50 no higher than Mem0's (``search_p50_ratio`` = memstack's ÷ Mem0's)."""
HIGHER_IS_BETTER = {"recall@5": True, "recall@10": True, "ingest_turns_per_s": True,
                    "search_p50_ms": False, "search_p99_ms": False}


def order(names: Sequence[str], index: int) -> list[str]:
    """The order the sides answer question ``index`` in: rotated by one per question, so that
    load that comes and goes on a shared machine falls on every side alike."""
    n = index % len(names) if names else 0
    return [*names[n:], *names[:n]]


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(seconds) * 1000.0, q)) if seconds else float("nan")


def side_figures(side: Side, questions: Sequence[Question], got: Retrieved,
                 seconds: Sequence[float]) -> dict[str, float]:
    """One side's figures, named ``<side>_<figure>``."""
    out = {f"{side.name}_recall@{k}": recall(questions, got, side.name, k) for k in KS}
    out[f"{side.name}_ingest_turns_per_s"] = side.turns_per_s
    out[f"{side.name}_ingest_s"] = side.seconds
    out[f"{side.name}_search_p50_ms"] = percentile_ms(seconds, 50)
    out[f"{side.name}_search_p99_ms"] = percentile_ms(seconds, 99)
    return out


def best(figures: dict[str, float], peers: Sequence[str]) -> dict[str, tuple[float, str]]:
    """Per figure, the best value among the ``peers`` sides and the side that reached it."""
    out: dict[str, tuple[float, str]] = {}
    for figure, higher in HIGHER_IS_BETTER.items():
        values = [(figures[f"{p}_{figure}"], p) for p in peers]
        out[figure] = max(values) if higher else min(values)
    return out


def summarise(sides: Sequence[Side], questions: Sequence[Question], got: Retrieved,
              seconds: dict[str, list[float]]) -> tuple[dict[str, float], dict[str, str]]:
    """Every figure, and per headline Mem0 figure the configuration it comes from. ``sides``:
    memstack's (named :data:`OURS`) and Mem0's (named ``mem0_<configuration>``)."""
    figures: dict[str, float] = {}
    for side in sides:
        figures.update(side_figures(side, questions, got, seconds[side.name]))
    peers = [s.name for s in sides if s.name != OURS]
    chosen: dict[str, str] = {}
    for figure, (value, name) in best(figures, peers).items():
        figures[f"{PEER}_{figure}"] = value
        chosen[f"{PEER}_{figure}"] = name
    for k in KS:
        figures[f"recall_lead@{k}"] = figures[f"{OURS}_recall@{k}"] - figures[f"{PEER}_recall@{k}"]
    figures["ingest_ratio"] = (figures[f"{OURS}_ingest_turns_per_s"]
                               / figures[f"{PEER}_ingest_turns_per_s"])
    figures["search_p50_ratio"] = (figures[f"{OURS}_search_p50_ms"]
                                   / figures[f"{PEER}_search_p50_ms"])
    ours = next(s for s in sides if s.name == OURS)
    figures["turns"] = float(ours.turns)
    figures["questions"] = float(len(questions))
    return figures, chosen


def met(figures: dict[str, float], goal: str) -> bool:
    sign, bound = GOALS[goal]
    value = figures[goal]
    return bool(value >= bound) if sign == ">=" else bool(value <= bound)


def goal_lines(figures: dict[str, float]) -> list[str]:
    """``"recall_lead@10 0.213 >= 0.2: met"``, one line per goal."""
    return [f"{goal} {figures[goal]:.3f} {sign} {bound:g}: "
            f"{'met' if met(figures, goal) else 'missed'}" for goal, (sign, bound) in GOALS.items()]
