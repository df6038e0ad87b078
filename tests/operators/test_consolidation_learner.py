"""The ridge learner's running sums equal sums built from scratch, after any writes/removals."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from memstack.operators.consolidation import (
    DuplicateItemError,
    FeatureConfig,
    LearnerConfig,
    RidgeLearner,
    ShapeError,
    WriteBatch,
)

DIM_IN, DIM, DIM_OUT = 12, 48, 6


def _config(half_life: float | None = None, dim: int = DIM, kind: str = "cos") -> LearnerConfig:
    features = FeatureConfig(dim_in=DIM_IN, dim=dim, kind=kind, bandwidth=0.8, seed=3)  # type: ignore[arg-type]  # a literal from the parameter
    return LearnerConfig(features=features, dim_out=DIM_OUT, ridge=1e-3, half_life_s=half_life)


def _item(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + i)
    return torch.randn(DIM_IN, generator=g), torch.randn(DIM_OUT, generator=g)


def _learner(half_life: float | None = None) -> RidgeLearner:
    return RidgeLearner(_config(half_life), torch.full((DIM_IN,), 0.05))


Array = npt.NDArray[np.float64]


def _scratch(learner: RidgeLearner, items: dict[str, tuple[int, float, float]]) -> tuple[
    Array, Array
]:
    """A and C from the surviving items, one outer product at a time, decayed to now."""
    gamma = learner.config.decay_rate
    a = np.zeros((DIM, DIM))
    c = np.zeros((DIM, DIM_OUT))
    for seed, weight, t in items.values():
        cue, target = _item(seed)
        phi = learner.features.lift(cue[None])[0].numpy()
        coef = weight * math.exp(-gamma * (learner.now - t))
        a += coef * np.outer(phi, phi)
        c += coef * np.outer(phi, target.double().numpy())
    return a, c


def _rel(run: torch.Tensor, ref: Array) -> float:
    """Relative error; the absolute error when nothing survives (the sums must then be 0)."""
    diff = float(np.linalg.norm(run.numpy() - ref))
    scale = float(np.linalg.norm(ref))
    return diff / scale if scale > 0 else diff


def _assert_matches(learner: RidgeLearner, items: dict[str, tuple[int, float, float]]) -> None:
    a_ref, c_ref = _scratch(learner, items)
    a_run, c_run = learner.sums()
    assert _rel(a_run, a_ref) <= 1e-9
    assert _rel(c_run, c_ref) <= 1e-9
    assert learner.n_items == len(items)


def _write(learner: RidgeLearner, item_id: str, seed: int, weight: float, t: float) -> None:
    cue, target = _item(seed)
    learner.write(item_id, cue, target, log_time=t, weight=weight)


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.floats(0.5, 2.0), st.floats(0.0, 50.0)),
        st.tuples(st.just("remove"), st.integers(0, 30), st.just(0.0)),
        st.tuples(st.just("batch"), st.integers(1, 5), st.floats(0.0, 50.0)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops=_ops, half_life=st.sampled_from([None, 5.0, 40.0]))
def test_sums_equal_scratch_after_any_writes_and_removals(
    ops: list[tuple[str, float, float]], half_life: float | None
) -> None:
    learner = _learner(half_life)
    live: dict[str, tuple[int, float, float]] = {}
    for n, (op, x, t) in enumerate(ops):
        if op == "write":
            _write(learner, f"i{n}", n, x, t)
            live[f"i{n}"] = (n, x, t)
        elif op == "batch":
            ids = [f"b{n}.{k}" for k in range(int(x))]
            pairs = [_item(100 * n + k) for k in range(int(x))]
            cues = torch.stack([p[0] for p in pairs])
            targets = torch.stack([p[1] for p in pairs])
            learner.write_batch(WriteBatch.of(ids, cues, targets, t, 1.5))
            live.update({i: (100 * n + k, 1.5, t) for k, i in enumerate(ids)})
        elif live:
            victim = sorted(live)[int(x) % len(live)]
            learner.remove([victim])
            del live[victim]
    _assert_matches(learner, live)


def test_removal_after_rescale_is_exact() -> None:
    """t0 moves (exponent > 30) between a write and its removal; survivors are tiny."""
    learner = _learner(half_life=1.0)
    _write(learner, "old", 1, 1.0, 0.0)
    _write(learner, "new", 2, 1.0, 100.0)
    learner.remove(["new"])
    assert learner.t0 is not None and learner.t0 <= 100.0
    _assert_matches(learner, {"old": (1, 1.0, 0.0)})


def test_remove_everything_leaves_zero_sums_and_zero_weights() -> None:
    learner = _learner()
    for i in range(5):
        _write(learner, f"i{i}", i, 1.0, float(i))
    learner.remove([f"i{i}" for i in range(5)])
    a, c = learner.sums()
    assert float(a.abs().max()) == 0.0 and float(c.abs().max()) == 0.0
    assert float(learner.weights().abs().max()) == 0.0


def test_superseded_fact_is_removed_and_successor_answers() -> None:
    learner = RidgeLearner(_config(dim=256), torch.zeros(DIM_IN))
    candidates = torch.randn(4, DIM_OUT, generator=torch.Generator().manual_seed(9))
    cue, _ = _item(7)
    learner.write("fact-v1", cue, candidates[1], log_time=1.0)
    for i in range(10):
        other, _ = _item(50 + i)
        learner.write(f"other{i}", other, candidates[i % 4], log_time=2.0)
    ids = ["a", "b", "c", "d"]
    assert learner.recall(cue, candidates, ids)[0].value_id == "b"
    successor = WriteBatch.of(["fact-v2"], cue[None], candidates[3:4], 3.0)
    applied = learner.supersede(["fact-v1"], successor)
    assert (applied.removed, applied.written, applied.missing) == (1, 1, ())
    assert "fact-v1" not in learner.log and "fact-v2" in learner.log
    assert learner.recall(cue, candidates, ids)[0].value_id == "d"
    rebuilt = RidgeLearner.rebuild(learner.config, torch.zeros(DIM_IN), learner.log.live())
    assert torch.allclose(rebuilt.weights(), learner.weights(), rtol=1e-7, atol=1e-9)


def test_removed_rows_are_erased_from_the_log() -> None:
    learner = _learner()
    _write(learner, "keep", 1, 1.0, 0.0)
    _write(learner, "forget", 2, 1.0, 0.0)
    chunk = learner.log._chunks[1]
    learner.remove(["forget"])
    assert float(chunk.cues.abs().sum()) == 0.0 and float(chunk.targets.abs().sum()) == 0.0
    assert learner.log.live().item_ids == ("keep",)


def test_duplicate_live_id_is_refused_and_removal_is_idempotent() -> None:
    learner = _learner()
    _write(learner, "x", 1, 1.0, 0.0)
    with pytest.raises(DuplicateItemError, match="supersede"):
        _write(learner, "x", 2, 1.0, 1.0)
    assert learner.remove(["x"]).removed == 1
    again = learner.remove(["x"])
    assert (again.removed, again.missing) == (0, ("x",))


@pytest.mark.parametrize("kind", ["cos", "relu"])
def test_recall_memorises_below_capacity(kind: str) -> None:
    learner = RidgeLearner(_config(dim=512, kind=kind), torch.zeros(DIM_IN))
    cues = torch.randn(40, DIM_IN, generator=torch.Generator().manual_seed(4))
    candidates = torch.randn(40, DIM_OUT, generator=torch.Generator().manual_seed(5))
    learner.write_batch(WriteBatch.of([f"i{i}" for i in range(40)], cues, candidates, 0.0))
    best, conf, _, _ = learner.decode(cues, candidates)
    assert float((best == torch.arange(40)).double().mean()) >= 0.95
    assert float(conf.min()) > 0.0


def test_same_code_path_on_every_available_device() -> None:
    """The learner runs unchanged on each device present (CPU here; CUDA when there is one)."""
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    cues = torch.randn(30, DIM_IN, generator=torch.Generator().manual_seed(6))
    targets = torch.randn(30, DIM_OUT, generator=torch.Generator().manual_seed(7))
    results = []
    for device in devices:
        learner = RidgeLearner(_config(half_life=10.0), torch.zeros(DIM_IN), device)
        learner.write_batch(WriteBatch.of([f"i{i}" for i in range(30)], cues, targets, 5.0))
        learner.remove(["i3", "i9"])
        assert learner.weights().device.type == device
        results.append(learner.weights().cpu())
    for other in results[1:]:
        assert torch.allclose(results[0], other, rtol=1e-6, atol=1e-8)


def test_wrong_shapes_are_refused_before_any_change() -> None:
    learner = _learner()
    bad = WriteBatch.of(["x"], torch.zeros(1, DIM_IN + 1), torch.zeros(1, DIM_OUT), 0.0)
    with pytest.raises(ShapeError, match="cues/targets"):
        learner.write_batch(bad)
    with pytest.raises(ShapeError):
        WriteBatch.of(["a", "b"], torch.zeros(2, DIM_IN), torch.zeros(3, DIM_OUT), 0.0)
    assert learner.n_items == 0 and learner.version == 0
