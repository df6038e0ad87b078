"""The store interfaces: :class:`EventIndex` (relational) and :class:`VectorIndex` (vectors).

Implementations are named for their backend (``DuckDBEventIndex``, ``LanceVectorIndex``) and
run one shared contract suite (``tests/pipelines/``). Both are projections of the log: every
write is keyed, so applying a batch twice leaves them as applying it once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from memstack.foundation.log_coordinates import LogCut
from memstack.operators.log import LogPosition
from memstack.operators.mutations import FactEntry, FactVersion, MemoryRow, Mutation, RecordRow
from memstack.operators.timeline import FactKey
from memstack.schemas.filters import Filter

Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True)
class ApplyResult:
    """What one :meth:`EventIndex.apply` wrote (row counts after deduplication by key)."""

    records: int
    fact_entries: int
    fact_versions: int
    deleted: int
    offsets: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class MergeResult:
    """What one :meth:`VectorIndex.merge` wrote: the table version and the row counts."""

    version: int
    inserted: int
    updated: int


@dataclass(frozen=True)
class MemoryHit:
    """A search result: the memory row and its score (distance for vectors, BM25 for text)."""

    row: MemoryRow
    score: float

    @property
    def memory_id(self) -> str:
        return self.row.memory_id


@dataclass(frozen=True)
class Maintenance:
    """What one index maintenance pass did."""

    rows: int
    optimized: bool = False
    built: tuple[str, ...] = ()


class EventIndex(Protocol):
    """Records, fact entries, fact versions and the applied offsets, in one transactional store."""

    @property
    def read_only(self) -> bool: ...

    def apply(
        self, mutations: Sequence[Mutation], next_offsets: Mapping[int, int], *, topic: str
    ) -> ApplyResult:
        """Write the mutations and the offsets in one transaction (``PutMemory`` is skipped)."""
        ...

    def applied_offsets(self, topic: str) -> dict[int, int]: ...

    def record(self, event_id: str) -> RecordRow | None: ...

    def records(
        self, tenant: str, *, session: str | None = None, since: datetime | None = None,
        until: datetime | None = None, limit: int | None = None, filter: Filter | None = None,
        as_of: tuple[datetime, datetime | LogCut] | None = None,
        start: datetime | None = None, end: datetime | None = None,
    ) -> list[RecordRow]:
        """Records of a tenant (and session) with ``since <= tt < until`` that pass the
        metadata ``filter``, answer as of ``(valid, known)`` and occurred in ``[start, end)``,
        in log order, at most ``limit`` of them."""
        ...

    def fact_entries(self, keys: Iterable[FactKey]) -> dict[FactKey, list[FactEntry]]:
        """The stored timeline inputs of each key (every key present, maybe empty)."""
        ...

    def facts_as_of(
        self, tenant: str, *, subject: str | None = None, relation: str | None = None,
        valid: datetime | None = None, known: datetime | LogPosition | LogCut | None = None,
    ) -> list[FactVersion]:
        """Versions valid at ``valid`` as known at ``known`` (each defaults to now; ``known`` is
        a time, a log position or a log cut), ordered by subject, relation, ``vt_from`` and
        object: the as-of rule of :mod:`memstack.schemas.asof` (a cut applies per fact key)."""
        ...

    def facts_as_of_subjects(
        self, tenant: str, subjects: Sequence[str], *, valid: datetime | None = None,
        known: datetime | None = None,
    ) -> list[FactVersion]:
        """``facts_as_of`` of every subject in ``subjects`` (all relations), one query."""
        ...

    def fact_history(
        self, tenant: str, subject: str, relation: str | None = None, *,
        known: datetime | LogPosition | LogCut | None = None,
    ) -> list[FactVersion]:
        """Every version of the subject's facts in transaction-time order per relation; with
        ``known``, as the timeline was known then (:mod:`memstack.schemas.asof`'s known
        clauses): versions not yet seen left out, a close not yet known shown as open."""
        ...

    def query(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """Read SQL over the event tables, as Arrow: the read side asks its questions here."""
        ...

    def table(self, name: str) -> pa.Table:
        """Every row of one event table (comparisons across deployments)."""
        ...

    def counts(self) -> dict[str, int]: ...

    def content_hashes(self) -> dict[str, str]: ...

    def content_hash(self) -> str: ...

    def close(self) -> None: ...


class VectorIndex(Protocol):
    """Memory rows with embeddings, searchable by vector and by full text, always per tenant."""

    @property
    def read_only(self) -> bool: ...

    @property
    def dim(self) -> int: ...

    def merge(self, rows: Sequence[MemoryRow], vectors: Vectors, *,
              maintain: bool = True) -> MergeResult:
        """Insert or update by ``memory_id`` (idempotent); ``vectors[i]`` embeds ``rows[i]``;
        index maintenance runs when due unless ``maintain`` is off."""
        ...

    def delete(self, memory_ids: Iterable[str]) -> int: ...

    def get(self, memory_ids: Iterable[str]) -> list[MemoryRow]: ...

    def rows_at(self, row_ids: Sequence[int], memory_ids: Sequence[str]) -> list[MemoryRow]:
        """The rows of ``memory_ids`` by the row ids a search returned (by id when moved)."""
        ...

    def vectors_of(self, memory_ids: Sequence[str]) -> Vectors:
        """The stored embeddings of ``memory_ids``, in the order given."""
        ...

    def scan(self, where: str | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """The rows matching ``where`` (all when None), unranked."""
        ...

    def table(self) -> pa.Table:
        """Every memory row with its vector (comparisons across deployments)."""
        ...

    def vector_candidates(self, vector: Vectors, *, tenant: str, k: int = 10,
                          where: str | None = None) -> pa.Table:
        """``search_vector`` as a table of candidate columns and ``score``."""
        ...

    def text_candidates(self, query: str, *, tenant: str, k: int = 10,
                        where: str | None = None) -> pa.Table:
        """The tenant's top ``k`` rows by BM25, as a table of candidate columns and ``score``."""
        ...

    def texts(self, *, tenant: str, where: str | None = None, limit: int = 1000) -> list[str]:
        """Up to ``limit`` texts of the tenant's rows under ``where`` (a sample, unranked)."""
        ...

    def placed(self, *, tenant: str, where: str | None = None, limit: int = 1000) -> pa.Table:
        """Up to ``limit`` of the tenant's rows under ``where``: candidate columns, ``session``
        and ``_rowid``, unranked."""
        ...

    def count(self) -> int: ...

    def search_vector(
        self, vector: Vectors, *, tenant: str, k: int = 10, where: str | None = None
    ) -> list[MemoryHit]: ...

    def search_text(
        self, query: str, *, tenant: str, k: int = 10, where: str | None = None
    ) -> list[MemoryHit]: ...

    def maintain(self, *, force: bool = False) -> Maintenance: ...

    def maintain_soon(self) -> None:
        """Maintain in the background (the caller does not wait)."""
        ...

    def content_hashes(self) -> dict[str, str]: ...

    def content_hash(self) -> str: ...

    def close(self) -> None: ...
