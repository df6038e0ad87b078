"""What the peers bench measures of each system: one ingest and a searcher, the same shape for
memstack and for every Mem0 configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

K = 10
"""Hits asked of every search; recall@5 reads the first 5 of them, as ``eval locomo`` does."""

Hits = list[tuple[str, ...]]
"""Per hit, in rank order, the LoCoMo turns (``D<session>:<turn>``) it stands for."""


class Searcher(Protocol):
    def search(self, question: str, conversation: str) -> Hits:
        """The top :data:`K` hits among the conversation's turns."""
        ...


@dataclass(frozen=True)
class Side:
    """One system after its ingest: ``seconds`` from nothing to searchable, start-up included."""

    name: str
    seconds: float
    turns: int
    searcher: Searcher

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.seconds if self.seconds > 0 else float("nan")
