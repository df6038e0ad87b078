"""The encoder bench's parts: the sample, the torch baseline in the ONNX shape, the interleaving
and the determinism oracle (the bench's figures come from these)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from memstack.jobs.bench.encoder import (
    TorchRunners,
    bitwise_across_batches,
    interleaved,
    sample_texts,
)
from memstack.jobs.eval.locomo_data import EvalDataMissingError, eval_dir
from memstack.jobs.measure import Report
from memstack.pipelines.embedding import MiniLMEncoder


def _has_locomo() -> bool:
    try:
        eval_dir()
    except EvalDataMissingError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _has_locomo(), reason="LoCoMo data not found "
                                "(the shared eval folder; set MEMSTACK_EVAL_DIR)")


@pytest.fixture(scope="module")
def minilm() -> MiniLMEncoder:
    return MiniLMEncoder().load()


def test_the_sample_is_fixed_distinct_locomo_turns() -> None:
    first, again = sample_texts(quick=True), sample_texts(quick=True)
    assert first == again and len(first) == 256 and all(":" in t for t in first[:20])


def test_torch_runners_give_torchs_vectors_in_order(minilm: MiniLMEncoder) -> None:
    texts = sample_texts(quick=True)[:40]
    np.testing.assert_allclose(TorchRunners(minilm).encode(texts), minilm.encode(texts),
                               atol=1e-5)


class BatchDependent:
    """A pure-logic encoder whose vectors depend on the call: what the oracle must catch."""

    name, dim = "batch-dependent", 4

    def load(self) -> BatchDependent:
        return self

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([[len(t), len(texts), 0, 1] for t in texts], dtype=np.float32)


class PerText(BatchDependent):
    name = "per-text"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([[len(t), 0, 0, 1] for t in texts], dtype=np.float32)


def test_the_bitwise_oracle_tells_batch_dependence_apart() -> None:
    texts = [f"text {i}" * (i % 5 + 1) for i in range(300)]
    assert bitwise_across_batches(PerText(), texts, PerText().encode(texts))
    assert not bitwise_across_batches(BatchDependent(), texts, BatchDependent().encode(texts))


def test_interleaving_times_every_side_over_every_text_in_order() -> None:
    texts = [f"t{i}" for i in range(600)]
    seconds, vectors = interleaved({"a": PerText(), "b": PerText()}, texts,  # type: ignore[dict-item]
                                   Report("test"))
    assert set(seconds) == {"a", "b"} and all(s > 0 for s in seconds.values())
    np.testing.assert_array_equal(vectors["a"], PerText().encode(texts))
