"""Distillation targets: a teacher says what a cue's value is now.

The learner is distilled from a teacher rather than trained on raw text: for a fact cue
(subject, relation) the teacher gives the embedding of the current object. The default teacher
will be the external memory itself (the store-backed teacher lives with the stores); a larger
model can plug in later through the same protocol. This module holds the protocol, a
``DictTeacher`` over given embeddings, an ``EmbeddingTeacher`` that embeds given object texts,
and ``softmax_mix``, the top-k mixture a retrieval-backed teacher answers with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from memstack.operators.consolidation.errors import ConsolidationError, ShapeError

Embedder = Callable[[Sequence[str]], torch.Tensor]
"""Texts → ``[n, dim]`` float embeddings (e.g. a SentenceTransformer's ``encode``)."""


class UnknownCueError(ConsolidationError):
    """The teacher has no answer for a cue: write the fact to memory first, or skip the cue."""


@dataclass(frozen=True, order=True)
class FactCue:
    """The cue of a fact: its subject and relation."""

    subject: str
    relation: str

    def text(self) -> str:
        """The cue as text to embed: ``"subject relation"``."""
        return f"{self.subject} {self.relation}"


class Teacher(Protocol):
    """Anything that gives distillation targets for cues, as of now."""

    def targets(self, cues: Sequence[FactCue]) -> torch.Tensor:
        """``[len(cues), dim_out]`` float32 target vectors."""
        ...


class DictTeacher:
    """Targets from a given mapping cue → value embedding."""

    def __init__(self, values: Mapping[FactCue, torch.Tensor]) -> None:
        self._values = dict(values)

    def targets(self, cues: Sequence[FactCue]) -> torch.Tensor:
        missing = [c for c in cues if c not in self._values]
        if missing:
            raise UnknownCueError(f"{len(missing)} cue(s) unknown to the teacher: {missing[0]}")
        return torch.stack([self._values[c].to(torch.float32) for c in cues])


class EmbeddingTeacher:
    """Targets as the embedding of each cue's object text (from given facts)."""

    def __init__(self, objects: Mapping[FactCue, str], embed: Embedder) -> None:
        self._objects = dict(objects)
        self._embed = embed
        self._cache: dict[str, torch.Tensor] = {}

    def objects(self, cues: Sequence[FactCue]) -> list[str]:
        """Each cue's current object text."""
        missing = [c for c in cues if c not in self._objects]
        if missing:
            raise UnknownCueError(f"{len(missing)} cue(s) unknown to the teacher: {missing[0]}")
        return [self._objects[c] for c in cues]

    def targets(self, cues: Sequence[FactCue]) -> torch.Tensor:
        texts = self.objects(cues)
        new = sorted({t for t in texts if t not in self._cache})
        if new:
            for text, vec in zip(new, self._embed(new), strict=True):
                self._cache[text] = vec.detach().to("cpu", torch.float32)
        return torch.stack([self._cache[t] for t in texts])


def softmax_mix(
    scores: torch.Tensor, values: torch.Tensor, k: int, temperature: float
) -> torch.Tensor:
    """A retrieval teacher's answer: the softmax(score / T)-weighted mix of the top-k values.

    ``scores`` ``[B, n]`` (e.g. cosine of each cue to n retrieved items), ``values``
    ``[B, n, dim]`` or ``[n, dim]`` → ``[B, dim]``.
    """
    if scores.ndim != 2 or temperature <= 0 or k < 1:
        raise ShapeError(
            f"scores must be [B, n], k >= 1, T > 0; got {tuple(scores.shape)}, {k}, {temperature}"
        )
    top = scores.topk(min(k, scores.shape[1]), dim=1)
    mix = torch.softmax(top.values / temperature, dim=1)
    if values.ndim == 2:
        chosen = values[top.indices]
    else:
        chosen = values.gather(1, top.indices[..., None].expand(-1, -1, values.shape[2]))
    return (mix[..., None] * chosen).sum(dim=1)
