"""Checkpoint → restore gives identical weights and state, and resumes like an unbroken run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from memstack.operators.consolidation import (
    CheckpointError,
    FeatureConfig,
    LearnerConfig,
    RidgeLearner,
    WriteBatch,
    checkpoint,
)

DIM_IN, DIM_OUT = 10, 5


def _batch(start: int, n: int, t: float) -> WriteBatch:
    g = torch.Generator().manual_seed(start)
    ids = [f"i{k}" for k in range(start, start + n)]
    cues, targets = torch.randn(n, DIM_IN, generator=g), torch.randn(n, DIM_OUT, generator=g)
    return WriteBatch.of(ids, cues, targets, t)


def _learner() -> RidgeLearner:
    config = LearnerConfig(
        features=FeatureConfig(dim_in=DIM_IN, dim=64, seed=11), dim_out=DIM_OUT, half_life_s=30.0
    )
    centre = torch.linspace(-0.1, 0.1, DIM_IN)
    learner = RidgeLearner(config, centre)
    learner.write_batch(_batch(0, 20, 1.0))
    learner.remove(["i4", "i7"])
    learner.write_batch(_batch(100, 10, 8.0))
    return learner


def test_snapshot_restore_gives_identical_weights_and_meta() -> None:
    learner = _learner()
    restored = checkpoint.restore(checkpoint.snapshot(learner, {"offsets": {"0": 41}}))
    assert restored.meta == {"offsets": {"0": 41}}
    assert torch.equal(restored.learner.weights(), learner.weights())
    assert restored.learner.digest() == learner.digest()
    assert restored.learner.log.live().item_ids == learner.log.live().item_ids
    assert restored.learner.version == learner.version


def test_resume_from_file_equals_uninterrupted_run(tmp_path: Path) -> None:
    unbroken = _learner()
    path = checkpoint.save(_learner(), tmp_path / "ckpt" / "learner.pt", {"applied": 3})
    resumed = checkpoint.load(path).learner
    for learner in (unbroken, resumed):
        learner.write_batch(_batch(200, 5, 12.0))
        learner.remove(["i0", "i101"])
    assert resumed.digest() == unbroken.digest()
    assert torch.equal(resumed.weights(), unbroken.weights())
    assert [p.name for p in path.parent.iterdir()] == ["learner.pt"]


def test_corrupt_or_missing_checkpoint_says_what_to_do(tmp_path: Path) -> None:
    data = checkpoint.snapshot(_learner())
    with pytest.raises(CheckpointError, match="unreadable"):
        checkpoint.restore(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="rebuild"):
        checkpoint.load(tmp_path / "absent.pt")
