"""The learner bank (idempotent, per-partition broadcast) and checkpoints kept by log position."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from memstack.operators.consolidation import CheckpointError, RidgeLearner
from memstack.pipelines.consolidation.bank import LearnerBank
from memstack.pipelines.consolidation.checkpoints import CheckpointStore, Manifest
from memstack.pipelines.consolidation.feed import BROADCAST, FeedRecord
from tests.consolidation.givens import SMALL

RNG = np.random.default_rng(3)


def writes(ids: list[str], shard: str, t: float) -> list[FeedRecord]:
    vecs = RNG.standard_normal((len(ids), 2, 384)).astype(np.float32)
    return [FeedRecord("write", i, shard, t, f"ev-{i}", v[0], v[1]) for i, v in zip(ids, vecs,
                                                                                   strict=True)]


def bank() -> LearnerBank:
    return LearnerBank(SMALL, torch.zeros(384, dtype=torch.float64))


def test_duplicates_are_skipped_and_broadcasts_apply_per_partition() -> None:
    b = bank()
    first = writes(["a", "b"], "acme", 1.0)
    assert b.apply(first, partition=0).written == 2
    again = b.apply([*first, *writes(["c"], "globex", 2.0)], partition=1)
    assert (again.written, again.skipped) == (1, 2)
    assert b.home == {"acme": 0, "globex": 1}
    gone = FeedRecord("remove", "a", BROADCAST, 3.0)
    assert b.apply([gone], partition=1).removed == 0  # acme lives on partition 0
    assert b.apply([gone], partition=0).removed == 1
    assert b.items_of_events(["ev-b", "ev-c", "ev-x"]) == {"acme": ["b"], "globex": ["c"]}
    scratch = RidgeLearner.rebuild(SMALL, b.centre, b.learners["acme"].log.live())
    got, want = b.learners["acme"].sums()[1], scratch.sums()[1]
    assert float((got - want).norm() / want.norm()) <= 1e-9


def test_checkpoints_are_kept_by_position_pruned_and_asked_as_of(tmp_path: Path) -> None:
    b, store = bank(), CheckpointStore(tmp_path / "p0", keep=2)
    b.apply(writes(["a"], "acme", 10.0) + writes(["g"], "globex", 10.0), partition=0)
    one = store.save(b, {0: 2}, 100.0)
    b.apply(writes(["b"], "acme", 20.0), partition=0)
    two = store.save(b, {0: 3}, 101.0)
    # globex did not change: its file is shared (hard link), acme's was rewritten
    g, a = Manifest.read(two).shards["globex"], Manifest.read(two).shards["acme"]
    assert os.stat(two / g).st_ino == os.stat(one / g).st_ino
    assert os.stat(two / a).st_ino != os.stat(one / a).st_ino
    b.apply(writes(["c"], "acme", 30.0), partition=0)
    three = store.save(b, {0: 4}, 102.0)
    assert [m.path for m in store.manifests()] == [two, three] and not one.exists()
    assert store.as_of(25.0) is not None and store.as_of(25.0).path == two  # type: ignore[union-attr]
    assert store.as_of(5.0) is None
    restored = bank()
    store.load(store.latest(), restored)  # type: ignore[arg-type]
    assert restored.digests() == b.digests() and restored.home == b.home
    assert store.save(b, {0: 4}, 102.0) == three  # same position: nothing new


def test_a_torn_checkpoint_is_never_picked_and_a_bad_one_says_so(tmp_path: Path) -> None:
    b, store = bank(), CheckpointStore(tmp_path / "p0")
    b.apply(writes(["a"], "acme", 1.0), partition=0)
    good = store.save(b, {0: 1}, 1.0)
    (tmp_path / "p0" / ".tmp-ckpt-half").mkdir()  # a crash mid-write leaves only a temp dir
    assert store.latest() is not None and store.latest().path == good  # type: ignore[union-attr]
    (good / "manifest.json").write_text("{")
    with pytest.raises(CheckpointError, match="manifest"):
        store.latest()
