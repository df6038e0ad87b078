"""Open problem 3: the session state against a context window, fair in bytes and in tokens.

For every question and every distance N of a grid, the question is asked when its last
evidence turn lies N turns back (after turn ``last + N``). Compared, on the same prefix of the
stream:

- the **session state** (the real operators: :func:`~memstack.operators.session_state.update`
  per turn, key = value = the turn's embedding, log time = the turn's time, read with
  ``read_vectors`` and decoded with ``score_values`` against the turns written so far): its top
  10 turns;
- a **byte window**: the latest whole turns whose UTF-8 text (one line each) fits in the bytes of
  the state's snapshot (``session_state.codec.snapshot_sums``, fixed by the config);
- a **budget window**: the latest whole turns that fit the context budget's tokens
  (``estimate_tokens``, 2,000 tokens: ``context()``'s default).

Recall is the share of the question's evidence turns in the top 10 (state) or in the window.

Two states are measured. The **code ring** (:mod:`memstack.operators.session_state.codes`,
:func:`measure_ring`) holds everything its read-out needs (codes and log offsets), so its bytes
are the whole cost. The **sums** (:func:`measure`) decode against the turn vectors written so far,
which their snapshot does not hold; besides the window in the sums' bytes, each point also
carries a window in the bytes of the sums plus that decode table (``window_honest``: float32,
``dim`` per turn), the honest accounting. :func:`choose_ring` picks the ring's bits and bytes on
the tuning conversations only.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from memstack.jobs.eval.openproblems.data import Asked, Stream, recall_at
from memstack.operators.session_state import (
    StateConfig,
    codes,
    empty,
    make_items,
    query_key,
    read_vectors,
    score_values,
    update,
)
from memstack.operators.session_state.codes import RingConfig
from memstack.operators.session_state.keys import Head
from memstack.pipelines.session_state.table import state_bytes as snapshot_bytes
from memstack.view.context import estimate_tokens

GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
NEAR_BELOW = 16
"""Near: evidence fewer than 16 turns back (inside ``context()``'s recent turns and more)."""
FAR_FROM = 64
"""Far: evidence 64 or more turns back (a few sessions of LoCoMo ago)."""
BUDGET_TOKENS = 2000
K = 10


@dataclass(frozen=True)
class Point:
    """One question asked at distance ``n``: the recall of each contender."""

    n: int
    state: float
    window_bytes: float
    window_budget: float
    window_honest: float | None = None
    """The window in the bytes of everything the read-out needs, where that differs."""


def state_bytes(config: StateConfig) -> int:
    """The snapshot size of sums with this config alone (fixed by the config)."""
    return snapshot_bytes(config, None)


def window(texts: Sequence[str], end: int, fits: int, cost: str) -> set[int]:
    """Positions of the latest whole turns before ``end`` whose cost fits in ``fits``."""
    used, out = 0, set()
    for i in range(end - 1, -1, -1):
        size = len(texts[i].encode()) + 1 if cost == "bytes" else estimate_tokens(texts[i])
        if used + size > fits:
            break
        used += size
        out.add(i)
    return out


def asked_at(stream: Stream, grid: Sequence[int] = GRID) -> dict[int, list[tuple[Asked, int]]]:
    """Prefix length -> the (question, N) pairs asked after that many turns."""
    at: dict[int, list[tuple[Asked, int]]] = defaultdict(list)
    for a in stream.asked:
        for n in grid:
            end = a.last + n + 1
            if end <= len(stream):
                at[end].append((a, n))
    return at


def measure(stream: Stream, config: StateConfig) -> list[Point]:
    """Walk the stream through the state; at every needed prefix, ask its questions."""
    at = asked_at(stream)
    size = state_bytes(config)
    state = empty(config)
    vectors = torch.from_numpy(stream.vectors).to(torch.float64)
    points: list[Point] = []
    for i in range(len(stream)):
        item = make_items(config, [f"t{i}"], [Head.TURNS], vectors[i:i + 1], vectors[i:i + 1],
                          [stream.times[i]])
        state = update(state, item)
        pairs = at.get(i + 1)
        if not pairs:
            continue
        ranked = _read(state, [a for a, _ in pairs], config)
        in_bytes = window(stream.texts, i + 1, size, "bytes")
        in_budget = window(stream.texts, i + 1, BUDGET_TOKENS, "tokens")
        table = (i + 1) * config.dim * 4  # the decode table: one float32 value per turn
        in_honest = window(stream.texts, i + 1, size + table, "bytes")
        for (a, n), top in zip(pairs, ranked, strict=True):
            ev = set(a.evidence)
            points.append(Point(n, recall_at(top, a.evidence, K), len(ev & in_bytes) / len(ev),
                                len(ev & in_budget) / len(ev), len(ev & in_honest) / len(ev)))
    return points


def measure_ring(stream: Stream, config: RingConfig, overhead: int = 0) -> list[Point]:
    """The code ring through the stream (offset = turn position). The byte window holds the
    bytes of the whole state: the ring's snapshot plus ``overhead`` (the rest of the session's
    snapshot: its header and the facts head's sums, which turn reads do not use)."""
    at = asked_at(stream)
    size = codes.snapshot_size(config) + overhead
    table = codes.encode(config, stream.vectors)
    lengths = codes.lengths_of(stream.texts)
    ring = codes.empty(config)
    points: list[Point] = []
    for i in range(len(stream)):
        ring = codes.append(ring, [i], table[i:i + 1], lengths[i:i + 1])
        pairs = at.get(i + 1)
        if not pairs:
            continue
        in_bytes = window(stream.texts, i + 1, size, "bytes")
        in_budget = window(stream.texts, i + 1, BUDGET_TOKENS, "tokens")
        for a, n in pairs:
            top = [o for o, _ in codes.read(ring, a.vector, K)]
            ev = set(a.evidence)
            points.append(Point(n, recall_at(top, a.evidence, K), len(ev & in_bytes) / len(ev),
                                len(ev & in_budget) / len(ev)))
    return points


def _read(state: object, asked: Sequence[Asked], config: StateConfig) -> list[list[int]]:
    from memstack.operators.session_state import SessionState

    assert isinstance(state, SessionState)
    q = torch.stack([query_key(config, torch.from_numpy(a.vector)) for a in asked])
    out, mean_v = read_vectors(state, q, Head.TURNS)
    scores = score_values(out, mean_v, state.values)
    k = min(K, scores.shape[1])
    return [list(map(int, row)) for row in torch.topk(scores, k, dim=1).indices.tolist()]


def curve(points: Sequence[Point]) -> dict[int, tuple[float, float, float, int]]:
    """N -> (state, byte window, budget window, questions)."""
    by_n: dict[int, list[Point]] = defaultdict(list)
    for p in points:
        by_n[p.n].append(p)
    return {n: (float(np.mean([p.state for p in ps])), float(np.mean([p.window_bytes for p in ps])),
                float(np.mean([p.window_budget for p in ps])), len(ps))
            for n, ps in sorted(by_n.items())}


def summary(points: Sequence[Point], prefix: str = "") -> dict[str, float]:
    """Near/far means and the crossover (the first N where the state beats the byte window;
    -1 when it never does)."""
    out: dict[str, float] = {}
    bands = {"near": [p for p in points if p.n < NEAR_BELOW],
             "far": [p for p in points if p.n >= FAR_FROM]}
    for band, chosen in bands.items():
        out[f"{prefix}state_recall_{band}"] = _mean([p.state for p in chosen])
        out[f"{prefix}window_recall_{band}"] = _mean([p.window_bytes for p in chosen])
        out[f"{prefix}budget_window_recall_{band}"] = _mean([p.window_budget for p in chosen])
        honest = [p.window_honest for p in chosen if p.window_honest is not None]
        if honest and len(honest) == len(chosen):
            out[f"{prefix}window_recall_{band}_honest"] = _mean(honest)
    cross = [n for n, (s, w, _, _) in curve(points).items() if s > w]
    out[f"{prefix}crossover_turns"] = float(cross[0]) if cross else -1.0
    return out


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else math.nan

