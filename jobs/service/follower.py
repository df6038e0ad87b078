"""A reader process's stores: the newest published snapshot, pinned per read, swapped in as
the writer publishes (:mod:`memstack.pipelines.service.snapshots`).

A read pins the snapshot current when it starts and reads only it, so a swap never changes
the stores under a running query; a snapshot that was swapped out closes when its last read
ends. The LanceDB table is read live (LanceDB is safe for readers in other processes and
each query sees its newest version), the DuckDB file from the snapshot. Before a new snapshot
becomes current, the key index of the old one moves to it, less the subjects the manifest
says changed (:func:`memstack.view.points.carry_points`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from memstack.foundation.errors import MemstackError
from memstack.foundation.log_coordinates import Position
from memstack.pipelines.service.snapshots import MANIFEST, SnapshotManifest, read_manifest
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.errors import StoreNotFoundError
from memstack.pipelines.stores.lance_index import LanceVectorIndex
from memstack.pipelines.stores.layout import LANCE_DIR
from memstack.view.points import carry_points

log = logging.getLogger(__name__)


class NoSnapshotError(MemstackError):
    """No snapshot was published in time: is the writer (``memstack serve --readers N``)
    running and caught up? Its log says why it does not publish."""


@dataclass
class _Pinned:
    stores: Stores
    manifest: SnapshotManifest
    reads: int = 0
    retired: bool = False
    events: DuckDBEventIndex = field(init=False)

    def __post_init__(self) -> None:
        assert isinstance(self.stores.events, DuckDBEventIndex)
        self.events = self.stores.events


class SnapshotFollower:
    """See the module. :meth:`refresh` is called by the reader's loop (off the loop: it opens
    files); :meth:`stores` and :meth:`pinned` by its requests."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._local = threading.local()
        self._current: _Pinned | None = None
        self._lance: tuple[str, LanceVectorIndex] | None = None
        self.heartbeat_at = 0.0
        self.newest: SnapshotManifest | None = None
        """The newest manifest read (maybe not swapped in yet: :attr:`behind`)."""
        self.behind = False
        """A newer snapshot than the current one is published."""
        self._changes: tuple[set[tuple[str, str]] | None, set[str]] = (None, set())
        """What the manifests read since the current snapshot say changed (None subjects:
        anything; the first snapshot carries nothing over)."""
        self._seen: tuple[int, int, int] | None = None

    # -- requests ------------------------------------------------------------------------

    def stores(self) -> Stores:
        """The stores a read sees: the one it pinned, else the current snapshot's."""
        pinned: _Pinned | None = getattr(self._local, "pinned", None)
        found = pinned if pinned is not None else self._current
        if found is None:
            raise NoSnapshotError("this reader has no snapshot open yet")
        return found.stores

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Hold the current snapshot for one read on this thread."""
        with self._lock:
            found = self._current
            if found is None:
                raise NoSnapshotError("this reader has no snapshot open yet")
            found.reads += 1
        self._local.pinned = found
        try:
            yield
        finally:
            self._local.pinned = None
            with self._lock:
                found.reads -= 1
                done = found.retired and found.reads == 0
            if done:
                found.events.close()

    @property
    def manifest(self) -> SnapshotManifest | None:
        current = self._current
        return None if current is None else current.manifest

    def position(self) -> Position:
        manifest = self.manifest
        return Position() if manifest is None else manifest.covers

    # -- the loop's side -----------------------------------------------------------------

    def wait_first(self, timeout_s: float) -> SnapshotManifest:
        """Block until a snapshot is open (the writer publishes one once it is ready)."""
        deadline = time.monotonic() + timeout_s
        while not self.refresh():
            if time.monotonic() > deadline:
                raise NoSnapshotError(f"no snapshot in {self.directory} after {timeout_s:.0f} "
                                      "s: is the writer (`memstack serve --readers N`) up?")
            time.sleep(0.1)
        assert self.manifest is not None
        return self.manifest

    def heartbeat(self) -> float:
        """When the writer last said it is alive (the newest manifest's heartbeat, read now:
        a probe answers right even while the loop has not swapped yet)."""
        found = read_manifest(self.directory)
        if found is not None:
            self.heartbeat_at = found.heartbeat_at
        return self.heartbeat_at

    def manifest_changed(self) -> bool:
        """Whether the manifest file changed since the last :meth:`refresh` (one ``stat``:
        cheap enough for the loop to ask every few milliseconds)."""
        try:
            st = (self.directory / MANIFEST).stat()
        except FileNotFoundError:
            return False
        return (st.st_ino, st.st_mtime_ns, st.st_size) != self._seen

    def refresh(self, swap: bool = True) -> bool:
        """Read the newest manifest and, with ``swap``, open its snapshot if it is not the
        current one (without: only note that it is :attr:`behind`); True when the current
        snapshot changed."""
        try:
            st = (self.directory / MANIFEST).stat()
        except FileNotFoundError:
            return False
        manifest = read_manifest(self.directory)
        if manifest is None:
            return False
        self._seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        self.heartbeat_at = manifest.heartbeat_at
        self._note_changes(manifest)
        self.newest = manifest
        current = self._current
        if current is not None and (current.manifest.seq == manifest.seq
                                    and current.manifest.writer_pid == manifest.writer_pid):
            current.manifest = manifest  # the heartbeat and the writer's url
            self.behind = False
            return False
        if not swap and current is not None:
            self.behind = True
            return False
        try:
            events = DuckDBEventIndex(self.directory / manifest.duckdb, read_only=True)
        except StoreNotFoundError:  # replaced between the manifest's read and the open
            self.behind = current is not None
            return False
        try:
            vectors = self._vectors(manifest.stores)
        except BaseException:
            events.close()
            raise
        if current is not None:
            subjects, ids = self._changes
            carry_points(current.events, events, subjects, ids)
        self._changes = (set(), set())
        fresh = _Pinned(Stores(Path(manifest.stores), events, vectors), manifest)
        with self._lock:
            old, self._current = self._current, fresh
            close_old = old is not None and old.reads == 0
            if old is not None:
                old.retired = True
        if close_old and old is not None:
            old.events.close()
        self.behind = False
        return True

    def _note_changes(self, manifest: SnapshotManifest) -> None:
        """Add what ``manifest`` says changed to what changed since the current snapshot, when
        it follows the last manifest read (same writer, ``previous`` its seq); any gap, and
        a manifest that says ``null``, make it "anything"."""
        last = self.newest
        if last is not None and (last.seq, last.writer_pid) == (manifest.seq,
                                                                manifest.writer_pid):
            return  # a heartbeat
        subjects, ids = self._changes
        chained = (last is not None and last.writer_pid == manifest.writer_pid
                   and manifest.previous == last.seq)
        if subjects is None or not chained or manifest.subjects is None:
            self._changes = (None, ids)
        else:
            subjects.update(manifest.subjects)
        ids.update(manifest.ids)

    def _vectors(self, stores: str) -> LanceVectorIndex:
        if self._lance is None or self._lance[0] != stores:
            vectors = LanceVectorIndex(Path(stores) / LANCE_DIR, read_only=True)
            self._lance = (stores, vectors)  # a switched service: the old one stays open
            log.info("reading the LanceDB table of %s", stores)
        return self._lance[1]

    def close(self) -> None:
        with self._lock:
            current, self._current = self._current, None
        if current is not None:
            current.events.close()
        if self._lance is not None:
            self._lance[1].close()
