"""A DuckDB file copied for readers in other processes: one ``CHECKPOINT`` and one sequential
copy under the writer's lock, renamed into place (docs/stores.md, "Reads while the pipeline
writes")."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from memstack.pipelines.stores.duckdb_index import SNAPSHOT

if TYPE_CHECKING:
    from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex

log = logging.getLogger(__name__)
T = TypeVar("T")


def wal_of(path: Path) -> Path:
    """The write-ahead log DuckDB keeps beside ``path``."""
    return path.with_name(path.name + ".wal")


def publish_snapshot(index: DuckDBEventIndex, path: Path,
                     capture: Callable[[], T] | None = None) -> T | None:
    """Checkpoint ``index`` and atomically copy its file to ``path``; returns ``capture()``,
    called under the same lock as the copy: no batch commits in between, and the index's
    listeners have been told every batch the copy holds (they run under that lock).

    Readers open the snapshot with ``DuckDBEventIndex(path, read_only=True)``; a reader that
    has an older snapshot open keeps reading it until it reopens (POSIX keeps the inode).
    Should the checkpoint leave a WAL behind, it is copied too (a read-only open replays it).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    wal, tmp_wal = wal_of(index.path), wal_of(tmp)
    with index.exclusive(SNAPSHOT) as con:
        captured = None if capture is None else capture()
        con.execute("CHECKPOINT")
        shutil.copyfile(index.path, tmp)
        copied_wal = wal.exists() and wal.stat().st_size > 0
        if copied_wal:
            shutil.copyfile(wal, tmp_wal)
    if copied_wal:
        os.replace(tmp_wal, wal_of(target))
    else:
        wal_of(target).unlink(missing_ok=True)
    os.replace(tmp, target)
    log.debug("published DuckDB snapshot %s", target)
    return captured
