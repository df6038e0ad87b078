"""The value types of the query layer: as-of coordinates, hits with provenance, contexts.

Fact versions and raw records are the index rows themselves (``FactVersion``, ``RecordRow``,
``MemoryRow`` from :mod:`memstack.operators.mutations`), re-exported here as ``Fact``,
``Record`` and ``Memory``: a query returns what is stored, with both time intervals and the
event that wrote it. Everything here is a frozen dataclass; the HTTP service and ``--json``
serialise them with pydantic (times as RFC 3339 in UTC).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from memstack.foundation.log_coordinates import LogCut as LogCut
from memstack.operators.mutations import FactVersion, MemoryRow, RecordRow

Fact = FactVersion
Record = RecordRow
Memory = MemoryRow

SearchMode = Literal["hybrid", "bm25", "vector"]


Known = datetime | LogCut


@dataclass(frozen=True)
class AsOf:
    """The coordinates of a query: valid time and transaction time (a time or a log cut)."""

    valid: datetime
    known: Known

    @property
    def known_time(self) -> datetime | None:
        return self.known if isinstance(self.known, datetime) else None

    @property
    def known_cut(self) -> LogCut | None:
        return self.known if isinstance(self.known, LogCut) else None

    def describe(self) -> AsOfInfo:
        cut = self.known_cut
        return AsOfInfo(self.valid, self.known_time, None if cut is None else cut.as_dict())


@dataclass(frozen=True)
class AsOfInfo:
    """The as-of coordinates echoed in answers (``known_offsets`` when given as a log cut)."""

    valid: datetime
    known: datetime | None
    known_offsets: dict[int, int] | None = None


@dataclass(frozen=True)
class ScoreParts:
    """How a hit was ranked: each retriever's rank and raw score, and the final score.

    Ranks are 1-based; ``None`` when that retriever did not return the row among its
    candidates. ``fused`` is the score the hits are ordered by: the weighted
    reciprocal-rank-fusion score ``sum(weight / (rrf_k + rank))`` (see
    :mod:`memstack.view.fusion`) plus ``neighbours``, the share of the scores of the rows around
    it (see :mod:`memstack.view.neighbours`; 0 for a single retriever's search).
    """

    fused: float
    bm25_rank: int | None = None
    bm25_score: float | None = None
    vector_rank: int | None = None
    vector_distance: float | None = None
    neighbours: float = 0.0


@dataclass(frozen=True)
class SearchHit:
    """A memory row (event id, session, kind, text, both time intervals) and its scores."""

    rank: int
    memory: MemoryRow
    score: ScoreParts

    @property
    def event_id(self) -> str:
        return self.memory.event_id


@dataclass(frozen=True)
class ContextItem:
    """One piece of an assembled context, with where it came from."""

    source: str
    """The :class:`ContextSource` that produced it (``facts``, ``relevant``, ``recent`` ...)."""
    text: str
    tokens: int
    event_id: str | None = None
    session: str | None = None
    occurred_at: datetime | None = None
    known_at: datetime | None = None
    score: float | None = None


@dataclass(frozen=True)
class Context:
    """A prompt-ready context: the text, the items it was made of, and the token accounting."""

    text: str
    items: tuple[ContextItem, ...]
    budget_tokens: int
    used_tokens: int
    dropped: int
    """Candidate items that did not fit the budget."""
    as_of: AsOfInfo
    sources: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class FactsAnswer:
    as_of: AsOfInfo
    facts: list[FactVersion]


@dataclass(frozen=True)
class HistoryAnswer:
    as_of: AsOfInfo
    versions: list[FactVersion]


@dataclass(frozen=True)
class SearchAnswer:
    as_of: AsOfInfo
    mode: str
    hits: list[SearchHit]


@dataclass(frozen=True)
class RecordsAnswer:
    as_of: AsOfInfo
    records: list[RecordRow]


Answer = FactsAnswer | HistoryAnswer | SearchAnswer | RecordsAnswer | Context
