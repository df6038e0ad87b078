"""Index maintenance of :class:`~memstack.pipelines.stores.lance_index.LanceVectorIndex`:
which indexes the ``memories`` table has, when they are built and refreshed, and the IVF_PQ
training (see :class:`IndexPolicy` and docs/stores.md).

Fragments stay bounded (:attr:`IndexPolicy.fragment_rows`): the refresh compacts through
pylance instead of LanceDB's ``optimize``, which makes files of about a million rows, so a
forget's purge rewrites one fragment, not the table (docs/forget.md).
"""

from __future__ import annotations

import logging
import math
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memstack.pipelines.stores import lance_capped, lance_files, lance_segments
from memstack.pipelines.stores.base import Maintenance
from memstack.pipelines.stores.errors import (
    StoreError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreWriteError,
)
from memstack.pipelines.stores.lance_background import MAINTENANCE_JOIN_S, MaintenanceThread
from memstack.pipelines.stores.lance_policy import IndexPolicy

log = logging.getLogger(__name__)

TABLE = "memories"
VECTOR_INDEX = "vector_idx"
TEXT_INDEX = "text_idx"


@contextmanager
def translated(operation: str, where: Path) -> Iterator[None]:
    """Turn Lance/LanceDB errors (OSError, ValueError, RuntimeError) into store errors."""
    try:
        yield
    except StoreError:
        raise
    except (OSError, ValueError, RuntimeError) as exc:
        text = str(exc)
        if "not found" in text.lower() or "does not exist" in text.lower():
            raise StoreNotFoundError(f"LanceDB {operation} on {where}: {text}") from exc
        if operation in ("merge", "delete"):
            raise StoreWriteError(
                f"LanceDB {operation} on {where} failed ({text}); nothing was committed, "
                "retry the batch") from exc
        raise StoreError(f"LanceDB {operation} on {where} failed: {text}") from exc


class IndexMaintenance:
    """The maintenance half of the index (a mixin: the state is the index's own)."""

    _dir: Path
    _uri: str
    _lock: threading.Lock
    _maintaining: threading.RLock
    _background: MaintenanceThread | None
    _maintenance_table: Any
    _table: Any
    _policy: IndexPolicy
    _trained_at: int
    _refreshed_at: int
    _read_only: bool
    _indexes_checked: float

    def _open_table(self) -> Any: ...

    def _writable(self, operation: str) -> None:
        if self._read_only:
            raise StoreReadOnlyError(
                f"{operation} on {self._dir}: the vector index is opened read-only")

    def _forget_indexes(self) -> None:
        self._indexes_checked = -math.inf

    @contextmanager
    def quiesced(self) -> Iterator[None]:
        """Hold the writer's lock with this handle on the latest version: no write of this
        index is in flight meanwhile, and none reads a version older than the latest.

        The purge removes older versions and unreferenced files inside it (a manifest read and
        a file listing, milliseconds); a commit the writer makes afterwards starts from the
        latest version."""
        with self._maintaining, self._lock, translated("refresh", self._dir):
            self._table.checkout_latest()
            self._forget_indexes()
            yield

    @contextmanager
    def maintenance_paused(self) -> Iterator[None]:
        """No maintenance pass runs inside (one in progress finishes first): a forget's purge
        rewrites and removes files that a pass would otherwise commit beside."""
        with self._maintaining:
            yield

    def maintain(self, *, force: bool = False) -> Maintenance:
        """Build missing indexes, retrain IVF_PQ on growth, refresh the others when due; the
        writer's lock is held throughout, so no write of this handle runs meanwhile."""
        self._writable("maintain")
        with self._maintaining, self._lock, translated("maintain", self._dir):
            done = self._maintain_on(self._table, force)
            self._forget_indexes()
        return self._logged(done)

    def maintain_soon(self) -> None:
        """Maintain in this index's maintenance thread (started on first use): the writer
        goes on writing while indexes are built, trained and refreshed, with handles of the
        thread's own (a commit of either side is rebased on the other's by Lance; a write that
        conflicts is retried, see :meth:`_merge_insert`). :meth:`quiesced` (a forget's
        purge) waits for a maintenance step in progress, and the next waits for the purge."""
        self._writable("maintain")
        if self._background is None:
            self._background = MaintenanceThread(self._maintain_in_background,
                                                 f"lance-maintenance {self._dir}")
        self._background.poke()

    def _maintain_in_background(self) -> Maintenance:
        with self._maintaining:
            with translated("maintain", self._dir):
                if self._maintenance_table is None:
                    self._maintenance_table = self._open_table()
                table = self._maintenance_table
                table.checkout_latest()
                done = self._maintain_on(table, False)
            if done.optimized or done.built:
                with self._lock, translated("maintain", self._dir):
                    self._table.checkout_latest()  # the writer's handle sees the new indexes
                    self._forget_indexes()
        return self._logged(done)

    def stop_maintenance(self, timeout_s: float = MAINTENANCE_JOIN_S) -> None:
        """Stop the maintenance thread, letting a step in progress finish (at most
        ``timeout_s``: a step is a few Lance commits, each atomic, so one cut short by the
        process's exit leaves the table at its last commit)."""
        background, self._background = self._background, None
        if background is not None:
            background.close(timeout_s)

    def _maintain_on(self, table: Any, force: bool) -> Maintenance:
        rows = table.count_rows()
        if rows == 0:
            return Maintenance(0)
        built = self._build_missing(table)
        p = self._policy
        if rows >= p.vector_min_rows and (
            force or rows >= self._trained_at * (1 + p.vector_rebuild_growth)
        ):
            self._train_vector_index(table, rows)
            built.append(VECTOR_INDEX)
        due = rows - self._refreshed_at >= p.refresh_rows
        if force or due:
            self._refresh(table)
            self._refreshed_at = rows
        return Maintenance(rows, force or due, tuple(built))

    @staticmethod
    def _logged(done: Maintenance) -> Maintenance:
        if done.built or done.optimized:  # bench pipeline counts these lines (MaintenanceLog)
            log.info("lance maintenance at %d rows: built %s, optimized %s", done.rows,
                     list(done.built), done.optimized)
        return done

    def _refresh(self, table: Any) -> None:
        """Bounded compaction, a new index segment for the new rows, the tiered merges due,
        versions past their keep dropped.

        This replaces LanceDB's ``optimize``, which compacts into fragments of up to ~1M rows
        (a forget purge would then rewrite the whole table) and adds new rows to the existing
        indexes (a rewrite of each: 17 s for the vector index at 1M rows); see
        :mod:`~memstack.pipelines.stores.lance_segments`.
        """
        p = self._policy
        lance_files.compact_small(self._uri, p.fragment_rows)
        lance_segments.index_new_rows(self._uri)
        lance_segments.merge_segments(self._uri, p.refresh_rows, p.merge_width, p.fragment_rows,
                                      p.segment_rows)
        table.checkout_latest()  # the commits above went through pylance handles
        lance_files.drop_versions(self._uri, p.keep_versions_for)

    def _build_missing(self, table: Any) -> list[str]:
        """The indexes not there yet, each built as segments of at most
        :attr:`IndexPolicy.segment_rows` (:mod:`~memstack.pipelines.stores.lance_capped`)."""
        kinds = {i.name: i.index_type for i in table.list_indices()}
        cap = self._policy.segment_rows
        built: list[str] = []
        if TEXT_INDEX not in kinds:
            lance_capped.build_scalar(self._uri, "text", "INVERTED", TEXT_INDEX, cap,
                                      **lance_capped.fts_params())
            built.append(TEXT_INDEX)
        wanted = [(c, "BTREE", "BTree") for c in self._policy.scalar_columns]
        wanted += [(c, "BITMAP", "Bitmap") for c in self._policy.bitmap_columns]
        for column, index_type, kind in wanted:
            name = f"{column}_idx"
            if kinds.get(name) != kind:  # absent, or built as another kind by an older version
                lance_capped.build_scalar(self._uri, column, index_type, name, cap)
                built.append(name)
        if built:
            table.checkout_latest()  # the builds committed through pylance handles
        return built

    def _train_vector_index(self, table: Any, rows: int) -> None:
        lance_capped.build_vector(self._uri, VECTOR_INDEX, self._policy.segment_rows,
                                  rows=rows, num_sub_vectors=self._policy.num_sub_vectors)
        table.checkout_latest()
        self._trained_at = rows

    def vector_index_trained_version(self) -> int | None:
        """The table version whose rows trained the IVF_PQ centroids and codebooks (None: no
        vector index). A purge remaps the index without retraining it, so a row erased at a
        version at or before this one still shaped the codebooks (never its codes: those are
        gone) until :meth:`retrain_vector_index` runs."""
        with translated("index_stats", self._dir), warnings.catch_warnings():
            # list_indices is deprecated for describe_indices, which has no creation version
            warnings.simplefilter("ignore", DeprecationWarning)
            versions = [int(i["version"]) for i in lance_files.latest(self._uri).list_indices()
                        if i["name"] == VECTOR_INDEX]
        return min(versions) if versions else None

    def retrain_vector_index(self) -> int:
        """Train IVF_PQ again on the rows there are now (for a background job: it holds no lock
        while training, on its own handle, and retries when a concurrent commit conflicts).
        Returns the version it trained on (:meth:`vector_index_trained_version`)."""
        self._writable("retrain_vector_index")
        with translated("retrain_vector_index", self._dir):
            rows = int(lance_files.latest(self._uri).count_rows())
            lance_capped.build_vector(self._uri, VECTOR_INDEX, self._policy.segment_rows,
                                      rows=rows, num_sub_vectors=self._policy.num_sub_vectors)
            self._trained_at = rows
        with self.quiesced():
            pass
        trained = self.vector_index_trained_version()
        if trained is None:
            raise StoreError(f"{self._dir}: the vector index is missing right after training it; "
                             "run retrain_vector_index again")
        return trained
