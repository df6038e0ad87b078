"""One agent's long stream: all ten LoCoMo conversations in time order, one state across it.

The turns of every conversation are merged by log time (ties keep conversation order, then turn
order) into one stream; one state is carried across all of it and every question is asked at
the end. Far questions are those whose last evidence turn is ``FAR_FROM`` or more turns back.
Contenders: the code ring and the sums (the same configs as the per-conversation figures), a
window in the ring's bytes, a window in the sums' bytes (and in the sums' bytes plus their decode
table), and a window of a realistic prompt budget (8,000 tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from memstack.jobs.eval.openproblems.data import F32, TUNE_CONVERSATIONS, Asked, Stream, recall_at
from memstack.jobs.eval.openproblems.state import FAR_FROM, K, _read, state_bytes, window
from memstack.operators.session_state import StateConfig, codes, empty, make_items, update
from memstack.operators.session_state.codes import RingConfig
from memstack.operators.session_state.keys import Head

PROMPT_TOKENS = 8000


@dataclass(frozen=True)
class LongStream:
    """The merged stream: texts and vectors in time order; questions with merged positions and
    the index of the conversation they come from."""

    texts: tuple[str, ...]
    times: tuple[float, ...]
    vectors: F32
    asked: tuple[Asked, ...]
    origin: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.texts)


def merged(data: Sequence[Stream]) -> LongStream:
    order = sorted((t, c, i) for c, s in enumerate(data) for i, t in enumerate(s.times))
    position = {(c, i): p for p, (_, c, i) in enumerate(order)}
    asked, origin = [], []
    for c, s in enumerate(data):
        for a in s.asked:
            asked.append(Asked(a.question, tuple(sorted(position[(c, e)] for e in a.evidence)),
                               a.vector))
            origin.append(c)
    return LongStream(tuple(data[c].texts[i] for _, c, i in order),
                      tuple(t for t, _, _ in order),
                      np.stack([data[c].vectors[i] for _, c, i in order]).astype(np.float32),
                      tuple(asked), tuple(origin))


def far_questions(long: LongStream) -> list[int]:
    end = len(long)
    return [q for q, a in enumerate(long.asked) if end - 1 - a.last >= FAR_FROM]


def figures(long: LongStream, ring_config: RingConfig, sums_config: StateConfig,
            overhead: int = 0) -> dict[str, float]:
    """``long_*`` figures at the end of the stream, over far questions (all, and held out).
    The state's bytes are its ring's plus ``overhead`` (the rest of the session's snapshot)."""
    end = len(long)
    chosen = far_questions(long)
    ring = codes.append(codes.empty(ring_config), list(range(end)),
                        codes.encode(ring_config, long.vectors), codes.lengths_of(long.texts))
    ring_tops = [[o for o, _ in codes.read(ring, long.asked[q].vector, K)] for q in chosen]
    state = empty(sums_config)
    vectors = torch.from_numpy(long.vectors).to(torch.float64)
    state = update(state, make_items(sums_config, [f"t{i}" for i in range(end)],
                                     [Head.TURNS] * end, vectors, vectors, long.times))
    sums_tops = _read(state, [long.asked[q] for q in chosen], sums_config)
    ring_bytes = codes.snapshot_size(ring_config) + overhead
    sums_bytes = state_bytes(sums_config)
    windows = {
        "window": window(long.texts, end, ring_bytes, "bytes"),
        "window8k": window(long.texts, end, PROMPT_TOKENS, "tokens"),
        "sums_window": window(long.texts, end, sums_bytes, "bytes"),
        "sums_window_honest": window(long.texts, end, sums_bytes + end * sums_config.dim * 4,
                                     "bytes"),
    }
    rows: dict[str, list[float]] = {name: [] for name in ("state", "sums_state", *windows)}
    for q, ring_top, sums_top in zip(chosen, ring_tops, sums_tops, strict=True):
        ev = long.asked[q].evidence
        rows["state"].append(recall_at(ring_top, ev, K))
        rows["sums_state"].append(recall_at(sums_top, ev, K))
        for name, held in windows.items():
            rows[name].append(len(set(ev) & held) / len(set(ev)))
    heldout = [j for j, q in enumerate(chosen) if long.origin[q] >= TUNE_CONVERSATIONS]
    out = {"long_turns": float(end), "long_questions_far": float(len(chosen)),
           "long_state_bytes": float(ring_bytes), "long_sums_state_bytes": float(sums_bytes),
           "long_window8k_turns": float(len(windows["window8k"]))}
    for name, values in rows.items():
        out[f"long_{name}_recall_far"] = float(np.mean(values)) if values else float("nan")
        if heldout:
            out[f"long_{name}_recall_far_heldout"] = float(np.mean([values[j] for j in heldout]))
    return out
