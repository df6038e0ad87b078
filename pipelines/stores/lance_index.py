"""``LanceVectorIndex``: memory rows with embeddings, vector and full-text search, in LanceDB.

Writes merge by ``memory_id`` (insert when absent: memory rows are immutable, so the first
write of an event wins and a re-applied batch changes nothing). Indexes are maintained as the
table grows, amortised over writes (see :class:`IndexPolicy` and docs/stores.md).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import lancedb
import numpy as np
import pyarrow as pa

from memstack.operators.mutations import MemoryRow
from memstack.pipelines.stores import arrow, lance_files
from memstack.pipelines.stores.base import MemoryHit, MergeResult, Vectors
from memstack.pipelines.stores.errors import (
    EmbeddingShapeError,
    StoreNotFoundError,
    StoreSchemaError,
)
from memstack.pipelines.stores.lance_maintenance import TABLE as TABLE  # re-exported
from memstack.pipelines.stores.lance_maintenance import TEXT_INDEX as TEXT_INDEX
from memstack.pipelines.stores.lance_maintenance import VECTOR_INDEX as VECTOR_INDEX
from memstack.pipelines.stores.lance_maintenance import IndexMaintenance, translated
from memstack.pipelines.stores.lance_policy import IndexPolicy as IndexPolicy  # re-exported
from memstack.pipelines.stores.lance_text import TenantTextSearch
from memstack.schemas.rows import (
    EMBEDDING_DIM,
    PRIMARY_KEYS,
    memories_schema,
    stored_memories_schema,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
WRITE_ATTEMPTS = 5
"""How often a write of the writer's handle is tried on the latest version (see
:meth:`LanceVectorIndex._on_latest`)."""
CANDIDATE_COLUMNS = ("memory_id", "tenant", "vt_from", "vt_to", "tt_from", "tt_to", "partition",
                     "offset")
"""What a search candidate carries (:meth:`LanceVectorIndex.text_candidates`): its id, its
tenant, and the columns of the as-of predicate, with ``_rowid`` and ``score``; full rows are
read for the final hits only (:meth:`LanceVectorIndex.rows_at`). The ranking's neighbour
stage reads the sessions of its best candidates only, so the legs read no more than fusion
needs."""


def quote(value: str) -> str:
    """A Lance SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


class LanceVectorIndex(IndexMaintenance):
    """The ``memories`` table of a LanceDB directory."""

    def __init__(self, directory: Path, *, dim: int = EMBEDDING_DIM, read_only: bool = False,
                 policy: IndexPolicy | None = None) -> None:
        self._dir = Path(directory)
        self._uri = str(self._dir / f"{TABLE}.lance")
        self._dim = dim
        self._read_only = read_only
        self._policy = policy or IndexPolicy()
        self._lock = threading.Lock()
        self._maintaining = threading.RLock()
        self._background = None
        self._maintenance_table = None
        self._schema = memories_schema(dim)
        # searches fetch every column but the embedding (ranking needs only the scores)
        self._columns = [n for n in self._schema.names if n != "vector"]
        if read_only and not self._dir.exists():
            raise StoreNotFoundError(f"no LanceDB index at {self._dir}; run the pipeline first")
        with translated("open", self._dir):
            consistency = timedelta(0) if read_only else None
            self._db = lancedb.connect(self._dir, read_consistency_interval=consistency)
            self._table = self._open_or_create()
        stored = stored_memories_schema(dim)
        if self._table.schema != stored:
            raise StoreSchemaError(
                f"{self._dir}: table '{TABLE}' has columns {self._table.schema.names}, this "
                f"version expects {stored.names} (types: {stored}); the stores directory was "
                "written by another version: move it away and rebuild it from the log "
                "(`memstack replay`)")
        self._refreshed_at = self._trained_at = 0
        self._indexes: frozenset[str] = frozenset()
        self._indexes_checked = -math.inf
        self._text = TenantTextSearch(self._table, self._policy,
                                      lambda tenant: self._filter(tenant, None))
        if not read_only:
            text = self._index_stats(TEXT_INDEX)  # rows left unindexed before a restart count
            self._refreshed_at = self._table.count_rows() - (
                text.num_unindexed_rows if text is not None else 0)
            stats = self._index_stats(VECTOR_INDEX)
            self._trained_at = stats.num_indexed_rows if stats is not None else 0
        log.info("opened LanceDB index %s (read_only=%s)", self._dir, read_only)

    def _open_table(self) -> Any:
        """Another LanceDB handle on the table (the maintenance thread's own)."""
        return lancedb.connect(self._dir).open_table(TABLE)

    def _open_or_create(self) -> Any:
        try:
            return self._db.open_table(TABLE)
        except ValueError as exc:
            if self._read_only or "was not found" not in str(exc):
                raise
        return self._db.create_table(TABLE, schema=self._schema)

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def version(self) -> int:
        return int(self._table.version)

    @property
    def uri(self) -> str:
        """The Lance dataset of ``memories`` (for pylance handles of its own: the purge)."""
        return self._uri

    @property
    def policy(self) -> IndexPolicy:
        return self._policy

    @property
    def lance_table(self) -> Any:
        """The LanceDB table of ``memories``, for the forget store's erasure and audit and for
        scans of whole rows (the forget resolution, the session-state forget)."""
        return self._table

    # -- writes --------------------------------------------------------------------------

    def merge(self, rows: Sequence[MemoryRow], vectors: Vectors, *,
              maintain: bool = True) -> MergeResult:
        """Insert the rows whose ``memory_id`` is absent; then maintain indexes if due."""
        self._writable("merge")
        if vectors.shape != (len(rows), self._dim):
            raise EmbeddingShapeError(
                f"{len(rows)} rows need vectors of shape ({len(rows)}, {self._dim}), got "
                f"{vectors.shape}; check the encoder's dimension")
        first: dict[str, int] = {}
        for i, row in enumerate(rows):
            first.setdefault(row.memory_id, i)
        if not first:
            return MergeResult(self.version, 0, 0)
        keep = list(first.values())
        data = arrow.memories_table([rows[i] for i in keep], vectors[keep], self._dim)
        with self._lock, translated("merge", self._dir):
            result = self._merge_insert(data)
        if maintain:
            self.maintain()
        return MergeResult(int(result.version), int(result.num_inserted_rows),
                           int(result.num_updated_rows))

    def _merge_insert(self, data: pa.Table) -> Any:
        """``merge_insert`` by id; again on the latest version when a file of the handle's
        version is gone (a purge removed it: see :meth:`quiesced`) or a commit of the
        maintenance thread conflicted (:meth:`maintain_soon`)."""
        return self._on_latest("merge", lambda: self._table.merge_insert(
            "memory_id").when_not_matched_insert_all().execute(data))

    def _on_latest(self, operation: str, run: Callable[[], T]) -> T:
        """``run`` (an idempotent write of the writer's handle), once more on the latest
        version after a removed file or a commit conflict, up to :data:`WRITE_ATTEMPTS`."""
        for attempt in range(WRITE_ATTEMPTS):
            try:
                return run()
            except (OSError, ValueError, RuntimeError) as exc:
                stale = "not found" in str(exc).lower()
                if not (stale or lance_files.is_conflict(exc)) or attempt == WRITE_ATTEMPTS - 1:
                    raise
                log.warning("%s on %s %s (%s); retrying on the latest version", operation,
                            self._dir, "read a removed file" if stale else "conflicted", exc)
                self._table.checkout_latest()
        raise AssertionError("unreachable")

    def delete(self, memory_ids: Iterable[str]) -> int:
        """Delete rows by id (the newest version only; old versions are the forget job's)."""
        self._writable("delete")
        ids = sorted(set(memory_ids))
        if not ids:
            return 0
        where = self._id_filter(ids)
        with self._lock, translated("delete", self._dir):
            present = self._table.count_rows(where)
            if present:
                self._on_latest("delete", lambda: self._table.delete(where))
        return int(present)

    def close(self) -> None:
        """Stop the maintenance thread if one runs (LanceDB holds no lock)."""
        self.stop_maintenance()

    # -- reads ---------------------------------------------------------------------------

    def _index_stats(self, name: str) -> Any:
        names = {i.name for i in self._table.list_indices()}
        return self._table.index_stats(name) if name in names else None

    def _has_index(self, name: str) -> bool:
        """Whether index ``name`` is built (cached for ``policy.index_check_every`` s)."""
        now = time.monotonic()
        if now - self._indexes_checked > self._policy.index_check_every:
            self._indexes = frozenset(i.name for i in self._table.list_indices())
            self._indexes_checked = now
        return name in self._indexes

    @staticmethod
    def _id_filter(ids: Sequence[str]) -> str:
        return f"memory_id IN ({', '.join(quote(i) for i in ids)})"

    def _filter(self, tenant: str, where: str | None) -> str:
        clause = f"tenant = {quote(tenant)}"
        return f"{clause} AND ({where})" if where else clause

    def count(self) -> int:
        with translated("count", self._dir):
            return int(self._table.count_rows())

    def get(self, memory_ids: Iterable[str]) -> list[MemoryRow]:
        ids = sorted(set(memory_ids))
        if not ids:
            return []
        with translated("get", self._dir):
            table = (self._table.search().where(self._id_filter(ids)).select(self._columns)
                     .limit(len(ids)).to_arrow())
        return arrow.to_memories(table.sort_by("memory_id"))

    def rows_at(self, row_ids: Sequence[int], memory_ids: Sequence[str]) -> list[MemoryRow]:
        """The rows of ``memory_ids`` (in that order) by the ``_rowid`` a search returned.

        A read by row id skips the id index (~3 ms less than :meth:`get` for 10 rows). Row ids
        hold for one table version: when a compaction since the search moved a row, or the id
        is gone, the rows are read by ``memory_id`` instead.
        """
        if not memory_ids:
            return []
        try:
            table = self._table.take_row_ids(list(row_ids)).select(self._columns).to_arrow()
            rows = {r.memory_id: r for r in arrow.to_memories(table)}
        except (OSError, ValueError, RuntimeError):
            rows = {}
        if not set(memory_ids) <= set(rows):
            rows = {r.memory_id: r for r in self.get(memory_ids)}
        return [rows[m] for m in memory_ids if m in rows]

    def scan(self, where: str | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """The rows matching ``where`` (LanceDB SQL; all rows when None), unranked, with
        ``columns`` (all when None)."""
        with translated("scan", self._dir):
            found: pa.Table = self._table.to_lance().to_table(
                columns=None if columns is None else list(columns), filter=where)
            return found

    def vectors_of(self, memory_ids: Sequence[str]) -> Vectors:
        """The stored embeddings of ``memory_ids`` (rows in the order given; all must exist)."""
        with translated("get", self._dir):
            table = (self._table.search().where(self._id_filter(memory_ids))
                     .select(["memory_id", "vector"]).limit(len(memory_ids)).to_arrow())
        pos = {m: i for i, m in enumerate(table.column("memory_id").to_pylist())}
        flat = table.column("vector").combine_chunks().flatten().to_numpy()
        matrix: Vectors = flat.reshape(-1, self._dim).astype(np.float32)
        return matrix[[pos[m] for m in memory_ids]]

    def search_vector(self, vector: Vectors, *, tenant: str, k: int = 10,
                      where: str | None = None) -> list[MemoryHit]:
        """Nearest memory rows of one tenant by cosine distance (prefiltered)."""
        return self._hits(self._nearest(vector, tenant, k, where, self._columns))

    def search_text(self, query: str, *, tenant: str, k: int = 10,
                    where: str | None = None) -> list[MemoryHit]:
        """Full-text (BM25) search over one tenant's memory rows (see :meth:`text_candidates`)."""
        return self._hits(self._matching(query, tenant, k, where, self._columns))

    def vector_candidates(self, vector: Vectors, *, tenant: str, k: int = 10,
                          where: str | None = None) -> pa.Table:
        """:meth:`search_vector` as a table of :data:`CANDIDATE_COLUMNS` and ``score``."""
        return self._nearest(vector, tenant, k, where, CANDIDATE_COLUMNS)

    def text_candidates(self, query: str, *, tenant: str, k: int = 10,
                        where: str | None = None) -> pa.Table:
        """The tenant's top ``k`` rows by BM25: :data:`CANDIDATE_COLUMNS` and ``score``; how
        the tenant is kept (ranked across tenants or prefiltered) is
        :class:`~memstack.pipelines.stores.lance_text.TenantTextSearch`'s choice."""
        return self._matching(query, tenant, k, where, CANDIDATE_COLUMNS)

    def texts(self, *, tenant: str, where: str | None = None, limit: int = 1000) -> list[str]:
        """Up to ``limit`` texts of the tenant's rows under ``where``, in storage order (a
        sample for statistics such as a search's common terms; no ranking, no as-of)."""
        with translated("texts", self._dir):
            found = (self._table.search().where(self._filter(tenant, where), prefilter=True)
                     .select(["text"]).limit(limit).to_arrow())
        return [str(t) for t in found.column("text").to_pylist()]

    def placed(self, *, tenant: str, where: str | None = None, limit: int = 1000) -> pa.Table:
        """Up to ``limit`` of the tenant's rows under ``where`` as :data:`CANDIDATE_COLUMNS`
        with ``session`` and ``_rowid``, unranked (a search's neighbour rows)."""
        with translated("placed", self._dir):
            found: pa.Table = (self._table.search()
                               .where(self._filter(tenant, where), prefilter=True)
                               .select([*CANDIDATE_COLUMNS, "session"]).with_row_id(True)
                               .limit(limit).to_arrow())
        return found

    def _nearest(self, vector: Vectors, tenant: str, k: int, where: str | None,
                 columns: Sequence[str]) -> pa.Table:
        with translated("search_vector", self._dir):
            flat = np.asarray(vector, dtype=np.float32).reshape(-1)
            builder: Any = self._table.search(flat, vector_column_name="vector")  # vector builder
            query: Any = (builder.distance_type("cosine")
                          .where(self._filter(tenant, where), prefilter=True)
                          .select([*columns, "_distance"]).with_row_id(True).limit(k))
            if self._has_index(VECTOR_INDEX):
                query = query.nprobes(self._policy.nprobes).refine_factor(
                    self._policy.refine_factor)
            return _scored(query.to_arrow(), "_distance")

    def _matching(self, text: str, tenant: str, k: int, where: str | None,
                  columns: Sequence[str]) -> pa.Table:
        with translated("search_text", self._dir):
            if not self._text_index_ready():
                empty = self._schema.empty_table().select(list(columns))
                return (empty.append_column("_rowid", pa.array([], pa.uint64()))
                        .append_column("score", pa.array([], pa.float32())))
            found = self._text.top(text, tenant, k, self._filter(tenant, where),
                                   scoped=where is not None, columns=columns)
            return _scored(found, "_score")

    def _text_index_ready(self) -> bool:
        """Whether the FTS index exists, building it in the writer when rows lack one."""
        if self._has_index(TEXT_INDEX):
            return True
        self._forget_indexes()  # another process may have built it since the last check
        if self._has_index(TEXT_INDEX):
            return True
        if self._table.count_rows() == 0:
            return False
        if self._read_only:
            log.warning("%s has no full-text index yet; the writer builds it", self._dir)
            return False
        with self._maintaining, self._lock:
            self._build_missing(self._table)
            self._forget_indexes()
        return True

    @staticmethod
    def _hits(table: pa.Table) -> list[MemoryHit]:
        rows = arrow.to_memories(table)
        scores = table.column("score").to_pylist()
        return [MemoryHit(r, float(s)) for r, s in zip(rows, scores, strict=True)]

    def table(self) -> pa.Table:
        """Every memory row with its vector (for comparisons across deployments)."""
        with translated("table", self._dir):
            rows: pa.Table = self._table.to_arrow()
        return rows

    def content_hashes(self) -> dict[str, str]:
        """Hash of the rows; embeddings rounded to :data:`arrow.VECTOR_TOLERANCE` (1e-4)."""
        with translated("content_hash", self._dir):
            table = self._table.to_arrow()
        return {TABLE: arrow.table_hash(table, PRIMARY_KEYS[TABLE])}

    def content_hash(self) -> str:
        return arrow.combine(self.content_hashes())


def _scored(table: pa.Table, score: str) -> pa.Table:
    """``table`` with its LanceDB score column (``_score``, ``_distance``) named ``score``."""
    return table.rename_columns(["score" if n == score else n for n in table.column_names])
