"""Teachers give distillation targets; the top-k mix weights retrieved values by softmax."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from memstack.operators.consolidation import (
    DictTeacher,
    EmbeddingTeacher,
    FactCue,
    UnknownCueError,
    softmax_mix,
)


def _embed(texts: Sequence[str]) -> torch.Tensor:
    return torch.tensor([[float(len(t)), float(t.count("a"))] for t in texts])


def test_embedding_teacher_embeds_current_objects_once() -> None:
    calls: list[Sequence[str]] = []

    def embed(texts: Sequence[str]) -> torch.Tensor:
        calls.append(texts)
        return _embed(texts)

    cues = [FactCue("Ada", "lives in"), FactCue("Bo", "lives in")]
    teacher = EmbeddingTeacher({cues[0]: "Lisbon", cues[1]: "Kyoto"}, embed)
    first = teacher.targets(cues)
    again = teacher.targets(cues[::-1])
    assert torch.equal(first, _embed(["Lisbon", "Kyoto"]))
    assert torch.equal(again, first.flip(0))
    assert len(calls) == 1 and cues[0].text() == "Ada lives in"


def test_dict_teacher_refuses_unknown_cues() -> None:
    teacher = DictTeacher({FactCue("a", "r"): torch.ones(3)})
    assert teacher.targets([FactCue("a", "r")]).shape == (1, 3)
    with pytest.raises(UnknownCueError):
        teacher.targets([FactCue("b", "r")])


def test_softmax_mix_of_top_k() -> None:
    values = torch.eye(3)
    scores = torch.tensor([[0.9, 0.1, 0.8]])
    mixed = softmax_mix(scores, values, k=2, temperature=0.1)
    expected = torch.softmax(torch.tensor([0.9, 0.8]) / 0.1, dim=0)
    assert torch.allclose(mixed[0], torch.stack([expected[0], torch.tensor(0.0), expected[1]]))
    per_row = softmax_mix(scores, values[None].expand(1, 3, 3), k=1, temperature=1.0)
    assert torch.equal(per_row, values[:1])
