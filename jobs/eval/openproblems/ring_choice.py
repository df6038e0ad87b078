"""The code ring's bits and bytes, chosen on the tuning conversations only.

A candidate is a code size, a share of salient slots and a byte budget for the **whole**
session state (the snapshot's
header and the facts head's sums take ``OVERHEAD`` of it, the ring the rest). Every candidate
of the grid (up to 16 KiB, the issue's bound) streams the tuning conversations
one by one and as one long stream (``openproblems.long_stream``). A candidate is eligible when it
beats its own byte window by ``MAX_CROSSOVER`` turns back; among those, the choice has the
largest sum of two far margins: over the window in its bytes per conversation, and over the
window of a realistic prompt (8,000 tokens) at the end of the long stream. The first favours
small states (a small window holds little), the second states that hold many turns.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memstack.jobs.eval.openproblems import long_stream
from memstack.jobs.eval.openproblems.data import Stream, recall_at
from memstack.jobs.eval.openproblems.state import K, measure_ring, summary, window
from memstack.operators.session_state import codes
from memstack.operators.session_state.codes import RingConfig
from memstack.pipelines.session_state.table import DEFAULT_CONFIG, state_bytes

OVERHEAD = state_bytes(DEFAULT_CONFIG, None)
"""A new session's snapshot without its ring: header and the facts head's sums (d = 8)."""
GRID = tuple(RingConfig(bits=b, budget=n - OVERHEAD, salient=f)
             for n in (4096, 6144, 8192, 12288, 16384) for b in (64, 96, 128, 192)
             for f in (0.0, 0.25, 0.5, 0.75))
MAX_CROSSOVER = 64


def long_margin(tuning: Sequence[Stream], config: RingConfig) -> float:
    """Far recall of the ring over the 8,000-token window at the end of the tuning
    conversations' long stream."""
    long = long_stream.merged(tuning)
    far = long_stream.far_questions(long)
    if not far:
        return 0.0
    end = len(long)
    ring = codes.append(codes.empty(config), list(range(end)), codes.encode(config, long.vectors),
                        codes.lengths_of(long.texts))
    held = window(long.texts, end, long_stream.PROMPT_TOKENS, "tokens")
    state = [recall_at([o for o, _ in codes.read(ring, long.asked[q].vector, K)],
                       long.asked[q].evidence, K) for q in far]
    prompt = [len(set(long.asked[q].evidence) & held) / len(set(long.asked[q].evidence))
              for q in far]
    return float(np.mean(state) - np.mean(prompt))


def choose_ring(tuning: Sequence[Stream], grid: Sequence[RingConfig] = GRID,
                overhead: int = OVERHEAD) -> tuple[RingConfig, dict[RingConfig, float]]:
    """The eligible candidate with the largest margin sum, and every eligible one's sum."""
    margins: dict[RingConfig, float] = {}
    for config in grid:
        out = summary([p for s in tuning for p in measure_ring(s, config, overhead)])
        if 0 < out["crossover_turns"] <= MAX_CROSSOVER:
            margins[config] = (out["state_recall_far"] - out["window_recall_far"]
                               + long_margin(tuning, config))
    if not margins:
        raise ValueError("no ring in the grid beats its window by 64 turns back on the tuning "
                         "conversations")
    return max(margins, key=lambda c: (margins[c], -c.budget)), margins
