"""Data files of the LanceDB memories table, through the ``lance`` package (pylance).

LanceDB's ``optimize`` compacts into files of up to a million rows and materialises deletions
only past 10% of a file, so erasing one row would rewrite a million-row file or leave the row
in it. Here compaction is bounded by :attr:`IndexPolicy.fragment_rows`, and an erasure rewrites
only the files that hold deleted rows (every other file is excluded from the plan); Lance remaps
the vector, full-text and scalar indexes to the rewritten rows instead of retraining them.
Measured in docs/forget.md.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import lance

if TYPE_CHECKING:
    from memstack.pipelines.stores.lance_policy import IndexPolicy

log = logging.getLogger(__name__)

UNLOCKED_TRIES = 2
COMMIT_RETRIES = 8
"""A rewrite whose commit a concurrent one preempted (a delete, maintenance) is planned again."""


@dataclass(frozen=True)
class Rewrite:
    """What :func:`rewrite_deleted` did."""

    fragments: int
    """Files of the table when it started."""
    rewritten: int
    """Files that held deleted rows (rewritten without them)."""
    rows_deleted: int
    seconds: float


@dataclass(frozen=True)
class Purge:
    """What :meth:`LanceVectorIndex.purge_deleted` did, in figures."""

    rewrite: Rewrite
    tags_deleted: int
    versions_removed: int
    versions_left: int
    seconds: float

    def figures(self) -> dict[str, float]:
        return {"fragments": float(self.rewrite.fragments),
                "fragments_rewritten": float(self.rewrite.rewritten),
                "rows_deleted": float(self.rewrite.rows_deleted),
                "rewrite_s": self.rewrite.seconds, "tags_deleted": float(self.tags_deleted),
                "versions_removed": float(self.versions_removed),
                "versions_left": float(self.versions_left), "cleanup_s": self.seconds}


def rewrite_deleted(uri: str, fragment_rows: int,
                    exclusive: Callable[[], AbstractContextManager[object]]) -> Rewrite:
    """Rewrite the files of ``uri`` that have deleted rows, and no other.

    A concurrent commit (a delete of the next request, maintenance) can preempt the rewrite's
    commit; Lance then keeps the old files, so the plan is made again until no file that had
    deleted rows at the start is left. After :data:`UNLOCKED_TRIES` preempted tries (a stream
    of deletes), the rewrite runs inside ``exclusive()`` (the writer lock: commits wait for
    the rewrite of the touched files only).
    """
    began = time.monotonic()
    first: set[int] | None = None
    fragments, deleted = 0, 0
    for tries in range(1, COMMIT_RETRIES + 1):
        ds = lance.dataset(uri)
        current = ds.get_fragments()
        touched = [f for f in current if f.deletion_file() is not None]
        if first is None:
            first = {f.fragment_id for f in touched}
            fragments, deleted = len(current), sum(int(f.num_deletions) for f in touched)
        if not first & {f.fragment_id for f in touched}:
            return Rewrite(fragments, len(first), deleted, time.monotonic() - began)
        keep = {f.fragment_id for f in touched}
        others = [f.fragment_id for f in current if f.fragment_id not in keep]
        try:
            if tries > UNLOCKED_TRIES:
                with exclusive():
                    _compact(lance.dataset(uri), fragment_rows, keep)
            else:
                _compact(ds, fragment_rows, keep, others)
        except OSError as exc:  # lance reports a preempted commit as OSError
            if "conflict" not in str(exc).lower():
                raise
            log.info("rewrite of deleted rows preempted by a concurrent commit; again")
    raise RuntimeError(f"{uri}: files with deleted rows were still there after "
                       f"{COMMIT_RETRIES} rewrites (concurrent commits); erase again")


def _compact(ds: Any, fragment_rows: int, keep: set[int],
             others: list[int] | None = None) -> None:
    """Compact the files ``keep`` of ``ds`` (deletions materialised), no other."""
    if others is None:
        others = [f.fragment_id for f in ds.get_fragments() if f.fragment_id not in keep]
    ds.optimize.compact_files(
        target_rows_per_fragment=fragment_rows, materialize_deletions=True,
        materialize_deletions_threshold=0.0, excluded_fragment_ids=others)


def drop_history(uri: str, rewrite: Rewrite) -> Purge:
    """Delete every tag and every version but the latest, with their unreferenced files."""
    began = time.monotonic()
    ds = lance.dataset(uri)
    tags = list(ds.tags.list())
    for tag in tags:
        ds.tags.delete(tag)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        stats = ds.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True,
                                        error_if_tagged_old_versions=False)
    left = len(lance.dataset(uri).versions())
    return Purge(rewrite, len(tags), int(stats.old_versions), left, time.monotonic() - began)


def optimize(table: Any, uri: str, policy: IndexPolicy) -> None:
    """Maintenance: merge small files up to ``policy.fragment_rows``, add new rows to every
    index, drop versions older than ``policy.keep_versions_for``."""
    ds = lance.dataset(uri)
    ds.optimize.compact_files(target_rows_per_fragment=policy.fragment_rows)
    ds = lance.dataset(uri)
    ds.optimize.optimize_indices()
    lance.dataset(uri).cleanup_old_versions(older_than=policy.keep_versions_for)
    table.checkout_latest()
