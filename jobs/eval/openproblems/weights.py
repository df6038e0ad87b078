"""Open problems 1 and 2: streaming into the consolidated weights, and memory-only retrieval.

Every turn of a conversation is consolidated in stream order by the real consolidation actor
(:class:`~memstack.pipelines.consolidation.actor.BankApplier` on Ray, fed the feed's wire
records), one conversation per learner (shard = the conversation). What a turn writes is set by
:class:`WeightsPlan`:

- the turn itself: cue = embed(turn), target = embed(turn) (an auto-association);
- ``context``: the previous turn as a cue for this one (cue = embed(turn i-1), target =
  embed(turn i)), so a question about what was asked reaches the answer;
- ``notes``: each session observation (LLM-written notes the dataset ships, citing turns) as a
  cue for every turn it cites, written once its last cited turn has passed.

A read is closed-book: ``W φ(question)`` decoded to the nearest stored turn values (the
conversation's turn embeddings), optionally centred on their mean (``centred``). No index is
scanned. The oracles use the dataset's evidence labels only; the joint solve is an independent
least-squares (QR) solve over the same items, not the learner's sums.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from memstack.jobs.eval.bm25 import BM25
from memstack.jobs.eval.openproblems.data import F32, Stream, recall_at
from memstack.jobs.measure import Report
from memstack.operators.consolidation import FeatureConfig, FeatureMap, LearnerConfig
from memstack.pipelines.consolidation.feed import FeedRecord

log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]
EARLY_SHARE = 0.1


@dataclass(frozen=True)
class WeightsPlan:
    """What each turn writes, how the learner is set, how reads decode (see module doc)."""

    dim: int = 2048
    bandwidth: float = 0.7
    ridge: float = 0.1
    context: int = 0
    notes: bool = False
    centred: bool = False

    def learner(self) -> LearnerConfig:
        return LearnerConfig(features=FeatureConfig(dim=self.dim, bandwidth=self.bandwidth),
                             ridge=self.ridge)


@dataclass(frozen=True)
class Item:
    item_id: str
    cue: F32
    target: F32
    log_time: float


def turn_items(stream: Stream, plan: WeightsPlan) -> list[list[Item]]:
    """Per turn, in stream order, the items written when that turn arrives."""
    v, times = stream.vectors, stream.times
    out: list[list[Item]] = []
    due: dict[int, list[int]] = {}
    for j, turns in enumerate(stream.note_turns):
        due.setdefault(max(turns), []).append(j)
    for i in range(len(stream)):
        items = [Item(f"{stream.name}/t{i}", v[i], v[i], times[i])]
        for back in range(1, plan.context + 1):
            if i - back >= 0:
                items.append(Item(f"{stream.name}/c{back}/t{i}", v[i - back], v[i], times[i]))
        if plan.notes:
            items += [Item(f"{stream.name}/n{j}/t{t}", stream.note_vectors[j], v[t], times[i])
                      for j in due.get(i, []) for t in stream.note_turns[j]]
        out.append(items)
    return out


def records(items: Sequence[Item], shard: str) -> list[bytes]:
    """The feed's wire bytes of ``items`` (what the actor decodes)."""
    return [FeedRecord("write", it.item_id, shard, it.log_time, None, it.cue, it.target).to_bytes()
            for it in items]


def decode(pred: F64, candidates: F32, k: int, centred: bool) -> list[list[int]]:
    """Top-k candidate indices per predicted value, by cosine (centred on the candidates)."""
    c = candidates.astype(np.float64)
    p = pred
    if centred:
        mean = c.mean(axis=0)
        c, p = c - mean, p - mean
    c = c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
    p = p / np.maximum(np.linalg.norm(p, axis=1, keepdims=True), 1e-12)
    scores = p @ c.T
    k = min(k, c.shape[0])
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return [list(map(int, row)) for row in top]


def joint_weights(items: Sequence[Item], plan: WeightsPlan, centre: torch.Tensor) -> F64:
    """One batch ridge solve over every item, by least squares on ``[Φ; √λ I] W = [Y; 0]``."""
    features = FeatureMap(plan.learner().features, centre)
    cues = torch.from_numpy(np.stack([it.cue for it in items]))
    phi = features.lift(cues)
    y = torch.from_numpy(np.stack([it.target for it in items])).to(torch.float64)
    dim = phi.shape[1]
    a = torch.cat([phi, (plan.ridge ** 0.5) * torch.eye(dim, dtype=torch.float64)])
    b = torch.cat([y, torch.zeros(dim, y.shape[1], dtype=torch.float64)])
    solved: F64 = torch.linalg.lstsq(a, b).solution.numpy()
    return solved


@dataclass
class StreamOutcome:
    """What items 1 and 2 measured on one conversation."""

    name: str
    early_turn_recall: list[float]
    end_turn_recall: list[float]
    early_question_recall: list[float]
    end_question_recall: list[float]
    rel_error: float
    items: int
    ranked: dict[str, list[list[int]]]


def consolidate_stream(actor: Any, stream: Stream, plan: WeightsPlan, centre: torch.Tensor,
                       report: Report) -> StreamOutcome:
    """Feed every turn to the actor in order; read the first 10% right after and at the end."""
    import ray

    per_turn = turn_items(stream, plan)
    early = max(1, round(EARLY_SHARE * len(stream)))
    shard = stream.name
    written: list[Item] = []
    first = _FirstShare(stream, early)
    for i, items in enumerate(per_turn):
        ray.get(actor.apply_raw.remote(records(items, shard)))
        written += items
        if i == early - 1:
            first.read(actor, shard, plan, "early")
    first.read(actor, shard, plan, "end")
    w_stream = ray.get(actor.weights.remote(shard))
    w_joint = joint_weights(written, plan, centre)
    rel = float(np.linalg.norm(w_stream - w_joint) / np.linalg.norm(w_joint))
    q = np.stack([a.vector for a in stream.asked])
    pred = ray.get(actor.predict.remote(shard, q))
    ranked = {"weights": decode(pred, stream.vectors, 10, plan.centred),
              "vector": decode(q.astype(np.float64), stream.vectors, 10, False)}
    bm25 = BM25(stream.texts)
    ranked["bm25"] = [bm25.rank(a.question.question, 10) for a in stream.asked]
    ranked["vector_with_notes"] = dense_with_notes(stream, q)
    report("%s: %d turns, %d items consolidated; stream vs joint %.2e", shard, len(stream),
           len(written), rel)
    return StreamOutcome(shard, first.turns["early"], first.turns["end"],
                         first.questions["early"], first.questions["end"], rel, len(written),
                         ranked)


def dense_with_notes(stream: Stream, q: F32, k: int = 10) -> list[list[int]]:
    """Dense retrieval over turns and notes; a note hit counts as every turn it cites (the
    same credit ``eval locomo`` gives notes), so a top 10 may name more than 10 turns."""
    hits: list[tuple[int, ...]] = [(i,) for i in range(len(stream))] + list(stream.note_turns)
    docs = np.concatenate([stream.vectors, stream.note_vectors]) if stream.notes else \
        stream.vectors
    out = []
    for row in decode(q.astype(np.float64), docs, k, False):
        out.append(list(dict.fromkeys(t for j in row for t in hits[j])))
    return out


class _FirstShare:
    """Recall of the first turns of a stream, among the first turns' values only (so the early
    and end reads face the same candidates and only forgetting can change them): a turn is
    recalled when a cue it was written under (its own text, or with ``context`` a previous
    turn's) decodes to it first; and questions whose evidence lies there (@10)."""

    def __init__(self, stream: Stream, early: int) -> None:
        self.stream, self.early = stream, early
        self.asked = [a for a in stream.asked if a.last < early]
        self.turns: dict[str, list[float]] = {}
        self.questions: dict[str, list[float]] = {}

    def read(self, actor: Any, shard: str, plan: WeightsPlan, when: str) -> None:
        import ray

        cands = self.stream.vectors[: self.early]
        pred = ray.get(actor.predict.remote(shard, cands))
        top = [row[0] for row in decode(pred, cands, 1, plan.centred)]
        self.turns[when] = [
            1.0 if any(t - back >= 0 and top[t - back] == t for back in range(plan.context + 1))
            else 0.0 for t in range(self.early)]
        self.questions[when] = []
        if self.asked:
            q = np.stack([a.vector for a in self.asked])
            ranked = decode(ray.get(actor.predict.remote(shard, q)), cands, 10, plan.centred)
            self.questions[when] = [recall_at(r, a.evidence, 10)
                                    for r, a in zip(ranked, self.asked, strict=True)]


def retrieval_recall(outcomes: Sequence[StreamOutcome], streams: Sequence[Stream], mode: str,
                     k: int = 10) -> float:
    """Mean evidence recall over every question of ``streams`` of ``mode``'s top ``k``
    (``vector_with_notes``: all turns cited by its top ``k`` hits)."""
    if mode == "vector_with_notes":
        k = 10 ** 6
    by_name = {s.name: s for s in streams}
    scores = [recall_at(r, a.evidence, k)
              for o in outcomes if o.name in by_name
              for r, a in zip(o.ranked[mode], by_name[o.name].asked, strict=True)]
    return float(np.mean(scores)) if scores else float("nan")
