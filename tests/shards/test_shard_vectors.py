"""shard_vectors: a sharded batch's texts encoded once, in one call, each part given its own."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from memstack.operators.mutations import MemoryRow, PutMemory
from memstack.pipelines.contracts import Plan
from memstack.pipelines.shards.projector import ShardedPlan, shard_vectors
from memstack.pipelines.stores.base import Vectors

AT = datetime(2026, 1, 1, tzinfo=UTC)


class CountingEncoder:
    """Pure logic: a vector per text (its length), and every call's texts logged."""

    name, dim = "counting", 2

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        return np.array([[len(t), 1.0] for t in texts], np.float32)


def part(partition: int, *texts: str) -> Plan:
    rows = [MemoryRow(f"m{partition}-{n}", f"m{partition}-{n}", "t", "s", None, "note", text,
                      AT, None, AT, None, partition, n) for n, text in enumerate(texts)]
    return Plan([], [PutMemory(r) for r in rows], [], {partition: len(texts)})


def test_every_part_gets_its_texts_from_one_call_each_text_once() -> None:
    encoder = CountingEncoder()
    parts = {0: part(0, "alpha", "shared"), 1: part(1, "shared", "gamma!")}
    plan = ShardedPlan([], [], [], {0: 2, 1: 2}, parts=parts)
    out = shard_vectors(encoder)(plan)
    assert encoder.calls == [["alpha", "shared", "gamma!"]]
    assert isinstance(out, ShardedPlan)
    assert set(out.parts[0].vectors) == {"alpha", "shared"}
    assert set(out.parts[1].vectors) == {"shared", "gamma!"}
    assert out.parts[1].vectors["gamma!"].tolist() == [6.0, 1.0]
    assert set(out.vectors) == {"alpha", "shared", "gamma!"}


def test_texts_the_plan_already_carries_are_not_encoded_again() -> None:
    encoder = CountingEncoder()
    given = {"alpha": np.array([9.0, 9.0], np.float32)}
    plan = ShardedPlan([], [], [], {0: 1}, given, parts={0: part(0, "alpha", "beta")})
    out = shard_vectors(encoder)(plan)
    assert encoder.calls == [["beta"]]
    assert out.parts[0].vectors["alpha"].tolist() == [9.0, 9.0]
    assert shard_vectors(encoder)(ShardedPlan([], [], [], {}, parts={})).parts == {}
    assert encoder.calls == [["beta"]]
