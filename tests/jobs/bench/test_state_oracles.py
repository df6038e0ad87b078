"""The session-state benchmark's window oracles and its removal check."""

from __future__ import annotations

import math
import random

import torch

from memstack.jobs.bench.state import (
    RELATIONS,
    _one_session,
    crossover,
    removal_error,
)

PAIRS = [(f"P{i}", r) for i in range(20) for r in RELATIONS]
OBJECTS = sorted({o for _, objs in RELATIONS.values() for o in objs})


def _embeddings(seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(len(PAIRS), 384, generator=gen, dtype=torch.float64)
    objs = torch.randn(len(OBJECTS), 384, generator=gen, dtype=torch.float64)
    return keys, dict(zip(OBJECTS, objs, strict=True))


def test_windows_hold_the_fact_only_while_its_bytes_fit() -> None:
    keys, objs = _embeddings(0)
    rng = random.Random(1)
    near = _one_session(rng, 0, PAIRS, keys, objs, budget=10_000)
    assert near.window and near.facts_window and near.state
    far = _one_session(rng, 2000, PAIRS, keys, objs, budget=10_000)
    assert not far.window  # ~2000 turns of ~60 bytes are far past 10 kB
    tiny = _one_session(rng, 50, PAIRS, keys, objs, budget=5)
    assert not tiny.window and not tiny.facts_window


def test_the_facts_window_holds_at_least_what_the_plain_window_holds() -> None:
    keys, objs = _embeddings(2)
    rng = random.Random(3)
    results = [_one_session(rng, n, PAIRS, keys, objs, budget=3_000)
               for n in (10, 40, 80, 160, 320, 640) for _ in range(5)]
    assert all(r.facts_window or not r.window for r in results)
    assert any(r.facts_window and not r.window for r in results)  # not 0 by construction


def test_crossover_is_the_first_distance_where_the_state_wins() -> None:
    state = [(16, 1.0), (64, 0.9), (256, 0.8)]
    assert crossover(state, [(16, 1.0), (64, 1.0), (256, 0.0)]) == 256
    assert math.isnan(crossover(state, [(16, 1.0), (64, 1.0), (256, 1.0)]))


def test_removal_error_is_at_rounding_level() -> None:
    assert removal_error(300) < 1e-10
    assert removal_error(300, "float32") < 1e-4
