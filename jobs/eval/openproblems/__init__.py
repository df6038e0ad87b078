"""``memstack eval openproblems``: the memory stack's four open problems, on LoCoMo.

Each LoCoMo conversation is a stream of turns in session order (``openproblems.data``), embedded
with the real encoder (MiniLM, cached in ``out/cache/``). Measured, every figure side by side in
one run:

1. **Streaming without forgetting** (``openproblems.weights``): every turn consolidated in
   order by the real Ray actor; the first 10% of the stream recalled right after it was written
   and at the end (``retention_first10``), and the streamed weights against one joint
   least-squares solve over the same items (``stream_vs_joint_rel_error``).
2. **Generalise**: each question to the weights alone (``weights_recall10``) against dense
   retrieval with the same encoder (``vector_recall10``) and BM25 (``bm25_recall10``).
3. **State vs window** (``openproblems.state``): the session state's read-out against a window
   of the latest turns in the state's bytes, and in the context budget's tokens, as the
   evidence lies N turns back. The headline state is the code ring (``state_*``: its bytes
   are everything its read-out needs; its bits and bytes chosen on the tuning conversations
   by ``openproblems.ring_choice``); the sums as shipped are
   ``sums_*`` (with the honest window, ``*_honest``: the sums' bytes plus the turn vectors
   they decode against). ``openproblems.long_stream``: all ten conversations as one agent's
   stream in time order, one state across it, questions at the end (``long_*``).
4. **Weights and state in the context** (``openproblems.context``): evidence recall of
   ``context()`` with and without their read-outs.

Settings were chosen on the first two conversations (``--quick`` runs just those); every figure
is also reported on the other eight alone (``_heldout``). ``--quick``: two conversations, and
the context with each read-out alone (``context_recall10_with_state`` / ``_with_weights``;
the full run skips these ablations to save half an hour).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from memstack.jobs.eval.openproblems import context as context_eval
from memstack.jobs.eval.openproblems import long_stream, ring_choice
from memstack.jobs.eval.openproblems import state as state_eval
from memstack.jobs.eval.openproblems.data import (
    TUNE_CONVERSATIONS,
    CachedVectors,
    Stream,
    streams,
)
from memstack.jobs.eval.openproblems.plots import plot_state, plot_weights
from memstack.jobs.eval.openproblems.weights import (
    StreamOutcome,
    WeightsPlan,
    consolidate_stream,
    retrieval_recall,
)
from memstack.jobs.measure import Report, Result
from memstack.operators.consolidation import RidgeLearner
from memstack.operators.session_state import StateConfig
from memstack.operators.session_state.codes import RingConfig
from memstack.pipelines.embedding import shared_encoder
from memstack.pipelines.session_state.table import DEFAULT_CONFIG, DEFAULT_RING, state_bytes

log = logging.getLogger(__name__)

SHIPPED = WeightsPlan()
"""The learner as it shipped before this evaluation: cosine RFF σ = 0.7, turn cue only."""
TUNED = WeightsPlan(bandwidth=1.0, context=1, centred=True)
"""Chosen on the first two conversations (docs/consolidation.md, "Measured on LoCoMo")."""
WITH_NOTES = replace(TUNED, notes=True)
RING = DEFAULT_RING
"""The code ring's defaults (bits, bytes), as ``ring_choice.choose_ring`` chose them on the
tuning conversations."""
STATES = {"sums": StateConfig(), "gamma0995": StateConfig(gamma_per_hour=0.995),
          "d64": StateConfig(dim=64, dtype="float32"),
          "d32": StateConfig(dim=32, dtype="float32")}
"""The sums as shipped (d = 128, float64, γ = 0.999 per hour), the decay they had before this
evaluation (0.995), and two smaller sums, each against its own byte window."""


def run(quick: bool, report: Report) -> Result:
    cache = CachedVectors(shared_encoder())
    data = streams(quick, cache, report)
    report("LoCoMo: %d conversations, %d turns, %d questions with evidence", len(data),
           sum(len(s) for s in data), sum(len(s.asked) for s in data))
    from memstack.pipelines.consolidation.distill import reference_centre

    centre = reference_centre(cache)
    figures: dict[str, float] = {"conversations": float(len(data)),
                                 "questions": float(sum(len(s.asked) for s in data))}
    with tempfile.TemporaryDirectory(prefix="memstack-op-") as tmp:
        outcomes, learners = _consolidate_all(data, centre, Path(tmp), report)
    figures |= weights_figures(outcomes, data)
    curves: dict[str, Curve] = {}
    found, curves["ring"] = ring_figures(data, report)
    figures |= found
    for name, config in STATES.items():
        found, curves[name] = state_figures(name, config, data, report)
        figures |= found
    report("long stream: %d conversations in time order, one state", len(data))
    figures |= long_stream.figures(long_stream.merged(data), RING, STATES["sums"],
                                   ring_choice.OVERHEAD)
    recalls = context_eval.measure(data, learners, cache, DEFAULT_CONFIG, DEFAULT_RING, report,
                                   ablations=quick)
    tuned_questions = sum(len(s.asked) for s in data[:TUNE_CONVERSATIONS])
    for name, values in recalls.items():
        figures[f"context_recall10_{name}"] = float(np.mean(values))
        figures["context_state_bytes"] = float(state_bytes(DEFAULT_CONFIG, DEFAULT_RING))
        if len(values) > tuned_questions:
            figures[f"context_recall10_{name}_heldout"] = float(np.mean(values[tuned_questions:]))
    figures["context_budget_tokens"] = float(context_eval.BUDGET)
    plots = [plot_state(curves, report), plot_weights(figures, report)]
    return Result("eval openproblems", figures, plots=plots)


def _consolidate_all(data: Sequence[Stream], centre: torch.Tensor, tmp: Path, report: Report
                     ) -> tuple[dict[str, list[StreamOutcome]], dict[str, RidgeLearner]]:
    """Each plan's streams through its own Ray actor (one learner per conversation); the tuned
    plan's learners come back (as checkpoint bytes) for the context read-out."""
    import ray

    from memstack.infra.ray import RayConfig, start_ray, stop_ray
    from memstack.infra.ray.paths import short_temp_dir
    from memstack.operators.consolidation import checkpoint
    from memstack.pipelines.consolidation.actor import applier_class

    start_ray(RayConfig(num_cpus=2, num_gpus=0, temp_dir=short_temp_dir(tmp / "ray")))
    out: dict[str, list[StreamOutcome]] = {}
    learners: dict[str, RidgeLearner] = {}
    try:
        for name, plan in (("tuned", TUNED), ("shipped", SHIPPED), ("with_notes", WITH_NOTES)):
            actor = applier_class(0.0).remote(plan.learner(), centre, "cpu", 2)
            try:
                report("consolidating with the %s plan %s", name, plan)
                out[name] = [consolidate_stream(actor, s, plan, centre, report) for s in data]
                if name == "tuned":
                    learners = {s.name: checkpoint.restore(
                        ray.get(actor.snapshot.remote(s.name)), "cpu").learner for s in data}
            finally:
                ray.kill(actor)
    finally:
        stop_ray()
    return out, learners


Curve = dict[int, tuple[float, float, float, int]]


def ring_figures(data: Sequence[Stream], report: Report) -> tuple[dict[str, float], Curve]:
    """Item 3 for the default state: the choice of its ring on the tuning conversations, then
    the figures of the default (all, and held out) and its curve. Its bytes are the whole
    snapshot of a session (header, the facts head's sums, the ring); the window gets as many."""
    chosen, margins = ring_choice.choose_ring(data[:TUNE_CONVERSATIONS])
    report("code ring on the tuning conversations: far margins (own bytes + 8k prompt) %s; "
           "chosen %s", {f"{c.bits}b/{c.budget + ring_choice.OVERHEAD}B/{c.salient}": round(m, 3)
                          for c, m in margins.items()}, chosen)
    whole = state_bytes(DEFAULT_CONFIG, RING)
    per_stream = [state_eval.measure_ring(s, RING, ring_choice.OVERHEAD) for s in data]
    points = [p for ps in per_stream for p in ps]
    out = state_eval.summary(points)
    out |= {"state_bytes": float(whole), "ring_bytes": float(codes_size(RING)),
            "state_bits": float(RING.bits), "state_items": float(RING.capacity),
            "state_default_is_chosen": float(chosen == RING)}
    heldout = [p for ps in per_stream[TUNE_CONVERSATIONS:] for p in ps]
    if heldout:
        out |= {f"{k}_heldout": v for k, v in state_eval.summary(heldout).items()}
    curve = state_eval.curve(points)
    report("default state (%d bytes): N -> (state, byte window, budget window) %s", whole,
           {n: tuple(round(x, 3) for x in v[:3]) for n, v in curve.items()})
    return out, curve


def codes_size(config: RingConfig) -> int:
    from memstack.operators.session_state.codes import snapshot_size

    return snapshot_size(config)


def state_figures(name: str, config: StateConfig, data: Sequence[Stream],
                  report: Report) -> tuple[dict[str, float], Curve]:
    """Item 3 for one sums config: near/far figures (all, and held out) and the curve."""
    per_stream = [state_eval.measure(s, config) for s in data]
    points = [p for ps in per_stream for p in ps]
    prefix = f"{name}_"
    out = state_eval.summary(points, prefix)
    out[f"{prefix}state_bytes"] = float(state_eval.state_bytes(config))
    heldout = [p for ps in per_stream[TUNE_CONVERSATIONS:] for p in ps]
    if heldout:
        out |= {f"{k}_heldout": v for k, v in state_eval.summary(heldout, prefix).items()}
    curve = state_eval.curve(points)
    report("state %s (%d bytes): N -> (state, byte window, budget window) %s", name,
           state_eval.state_bytes(config),
           {n: tuple(round(x, 3) for x in v[:3]) for n, v in curve.items()})
    return out, curve


def _split(data: Sequence[Stream]) -> dict[str, Sequence[Stream]]:
    parts: dict[str, Sequence[Stream]] = {"": data}
    if len(data) > TUNE_CONVERSATIONS:
        parts["_heldout"] = data[TUNE_CONVERSATIONS:]
    return parts


def retention(outcomes: Sequence[StreamOutcome], suffix: str = "") -> dict[str, float]:
    """Item 1: recall of the first 10% of each stream right after it was written and at the
    end, of its turns (``retention_first10``) and of the questions asked about it."""
    out: dict[str, float] = {}
    early = [x for o in outcomes for x in o.early_turn_recall]
    end = [x for o in outcomes for x in o.end_turn_recall]
    out[f"first10_recall_early{suffix}"] = float(np.mean(early))
    out[f"first10_recall_end{suffix}"] = float(np.mean(end))
    out[f"retention_first10{suffix}"] = float(np.mean(end) / np.mean(early))
    q_early = [x for o in outcomes for x in o.early_question_recall]
    q_end = [x for o in outcomes for x in o.end_question_recall]
    if q_early and np.mean(q_early) > 0:
        out[f"first10_question_recall_early{suffix}"] = float(np.mean(q_early))
        out[f"retention_first10_questions{suffix}"] = float(np.mean(q_end) / np.mean(q_early))
    out[f"first10_questions{suffix}"] = float(len(q_early))
    return out


def weights_figures(outcomes: dict[str, list[StreamOutcome]],
                    data: Sequence[Stream]) -> dict[str, float]:
    tuned = outcomes["tuned"]
    out = retention(tuned) | retention(outcomes["shipped"], "_shipped")
    out["stream_vs_joint_rel_error"] = max(o.rel_error for os in outcomes.values() for o in os)
    out["items_consolidated"] = float(sum(o.items for o in tuned))
    for suffix, part in _split(data).items():
        out[f"weights_recall10{suffix}"] = retrieval_recall(tuned, part, "weights")
        out[f"vector_recall10{suffix}"] = retrieval_recall(tuned, part, "vector")
        out[f"bm25_recall10{suffix}"] = retrieval_recall(tuned, part, "bm25")
        out[f"weights_recall10_shipped{suffix}"] = retrieval_recall(
            outcomes["shipped"], part, "weights")
        out[f"weights_recall10_with_notes{suffix}"] = retrieval_recall(
            outcomes["with_notes"], part, "weights")
        out[f"vector_recall10_with_notes{suffix}"] = retrieval_recall(
            tuned, part, "vector_with_notes")
    return out
