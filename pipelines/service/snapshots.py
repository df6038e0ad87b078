"""Published snapshots of the stores, for reader processes (``memstack serve --readers N``).

The writer process (the live worker) publishes, at most every ``interval_s`` while the stores
change, a copy of its DuckDB file and a **manifest** naming it: the position it covers, the
stores directory whose LanceDB table readers read live, and what changed since the previous
snapshot (the subjects a batch touched and the fact ids it deleted, or ``changed: null`` when
anything may have: a forget's erase, a purge). Readers pin the newest manifest's snapshot,
keep the key index of subjects nothing touched, and answer ``after=`` once a manifest covers
it (docs/service.md, "Reader processes").

The manifest is rewritten every ``heartbeat_s`` even when nothing changed, so a reader can
tell a quiet writer from a dead or stuck one (its ``/healthz`` reports ``stale``).

Files, under ``$MEMSTACK_HOME/service/snapshots/``: ``manifest.json`` (replaced atomically)
and ``duckdb-<seq>.duckdb``; a snapshot is deleted ``keep_s`` after a newer one replaced it
(a reader that still has it open keeps reading it: POSIX keeps the inode).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstack.foundation.log_coordinates import Position
from memstack.operators.mutations import (
    DeleteFactEntry,
    DeleteFactVersion,
    Mutation,
    PutFactEntry,
    PutFactVersion,
)
from memstack.pipelines.stores.duckdb_snapshot import publish_snapshot

if TYPE_CHECKING:
    from memstack.foundation.settings import Settings
    from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
INTERVAL_S = 0.2
"""Snapshots published at most this often while the stores change (a read ``after=`` a write
waits about half of it on average; each costs a checkpoint and a copy of the DuckDB file)."""
HEARTBEAT_S = 1.0
KEEP_S = 10.0
MAX_CHANGED = 20_000
"""More changed subjects and ids than this since the last snapshot: published as ``null``
(readers drop their key index) instead of a long list."""


def snapshot_dir(settings: Settings) -> Path:
    return settings.home / "service" / "snapshots"


@dataclass(frozen=True)
class SnapshotManifest:
    """One published snapshot (the manifest file's fields)."""

    seq: int
    duckdb: str
    """The snapshot's file name, in the manifest's directory."""
    stores: str
    """The stores directory it was copied from; readers read its LanceDB table live."""
    position: str
    """The position token the snapshot covers (a read ``after=`` it may answer from it)."""
    partitions: str
    """The topics' partitions as a position of offset 0 each (an ``after=`` naming others is
    refused, as the writer refuses it)."""
    previous: int
    """The seq of the snapshot before (0: none): ``subjects`` and ``ids`` are relative to it."""
    subjects: list[tuple[str, str]] | None
    """``(tenant, subject)`` touched since ``previous``; None: anything may have changed."""
    ids: list[str]
    """Fact version and entry ids deleted since ``previous``."""
    published_at: float
    heartbeat_at: float
    writer_url: str | None
    """Where the writer takes writes, forgets and the change feed."""
    writer_pid: int
    bytes: int = 0
    """The snapshot's size (its DuckDB file)."""
    published: int = 0
    """Snapshots this writer published so far, this one included."""
    copy_s: float = 0.0
    """Their checkpoints and copies together, seconds (what publishing cost the writer)."""

    @property
    def covers(self) -> Position:
        return Position.parse(self.position)

    def write(self, directory: Path) -> None:
        tmp = directory / f".{MANIFEST}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, directory / MANIFEST)


def read_manifest(directory: Path) -> SnapshotManifest | None:
    """The newest manifest in ``directory`` (None: none published yet)."""
    try:
        raw: dict[str, Any] = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        return None
    subjects = raw.get("subjects")
    raw["subjects"] = None if subjects is None else [(t, s) for t, s in subjects]
    return SnapshotManifest(**raw)


class ChangedSince:
    """What the committed batches changed since the last snapshot: a listener of
    :meth:`DuckDBEventIndex.on_change` (it runs under the index's lock, as the copy does)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subjects: set[tuple[str, str]] = set()
        self._ids: set[str] = set()
        self._all = True  # before the first snapshot, readers hold nothing to keep
        self.dirty = threading.Event()

    def __call__(self, mutations: Sequence[Mutation] | None) -> None:
        with self._lock:
            if mutations is None:
                self._all = True
            else:
                for m in mutations:
                    if isinstance(m, PutFactVersion):
                        self._subjects.add((m.row.tenant, m.row.subject))
                    elif isinstance(m, PutFactEntry):
                        self._subjects.add((m.entry.tenant, m.entry.subject))
                    elif isinstance(m, DeleteFactVersion):
                        self._ids.add(m.version_id)
                    elif isinstance(m, DeleteFactEntry):
                        self._ids.add(m.event_id)
                if len(self._subjects) + len(self._ids) > MAX_CHANGED:
                    self._all = True
            if self._all:
                self._subjects.clear()
                self._ids.clear()
        self.dirty.set()

    def take(self) -> tuple[list[tuple[str, str]] | None, list[str]]:
        """The changes so far, and start over."""
        with self._lock:
            out = (None if self._all else sorted(self._subjects), sorted(self._ids))
            self._subjects, self._ids, self._all = set(), set(), False
            return out


class SnapshotPublisher:
    """Publishes snapshots of the writer's stores on a thread of its own (see the module).

    ``applied`` is called under the event index's lock (with the copy), so it must not query
    the index: the service passes its applied offsets kept in memory."""

    def __init__(self, directory: Path, events: Callable[[], DuckDBEventIndex],
                 applied: Callable[[], Position], partitions: Position, *,
                 interval_s: float = INTERVAL_S, heartbeat_s: float = HEARTBEAT_S,
                 keep_s: float = KEEP_S) -> None:
        self.directory = directory
        self._events = events
        self._applied = applied
        self._partitions = partitions.token
        self._interval_s = interval_s
        self._heartbeat_s = heartbeat_s
        self._keep_s = keep_s
        self.changes = ChangedSince()
        self.writer_url: str | None = None
        self._listening: DuckDBEventIndex | None = None
        self._last: SnapshotManifest | None = None
        self._retired: list[tuple[float, Path]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.published = 0
        self.copy_seconds = 0.0

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for old in self.directory.glob("duckdb-*.duckdb*"):  # a previous writer's
            old.unlink(missing_ok=True)
        self.publish()
        self._thread = threading.Thread(target=self._run, name="snapshot-publisher",
                                        daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """The applied position moved (a batch, a forget): publish soon."""
        self.changes.dirty.set()

    def close(self) -> None:
        """Stop publishing, and remove the snapshots and the manifest (call once the readers
        stopped: a later writer publishes its own)."""
        self._stop.set()
        self.changes.dirty.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        (self.directory / MANIFEST).unlink(missing_ok=True)
        for path in self.directory.glob("duckdb-*.duckdb*"):
            path.unlink(missing_ok=True)

    def _run(self) -> None:
        next_at = 0.0
        while not self._stop.is_set():
            self.changes.dirty.wait(self._heartbeat_s)
            if self._stop.is_set():
                return
            wait = next_at - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                return
            try:
                if self.changes.dirty.is_set() or self._last is None:
                    self.changes.dirty.clear()
                    self.publish()
                    next_at = time.monotonic() + self._interval_s
                else:
                    self._beat()
            except Exception:  # a full disk, a store switched under it: retried, never fatal
                log.exception("publishing a snapshot for the readers failed; retrying")
                self.changes.dirty.set()
                if self._stop.wait(1.0):
                    return

    def publish(self) -> SnapshotManifest:
        """Copy the stores' DuckDB file and replace the manifest (on the caller's thread)."""
        events = self._events()
        if events is not self._listening:  # the first, or the service switched stores
            events.on_change(self.changes)
            self._listening = events
            self.changes(None)
        seq = (self._last.seq if self._last is not None else 0) + 1
        name = f"duckdb-{seq:08d}.duckdb"
        started = time.perf_counter()

        def capture() -> tuple[Position, tuple[list[tuple[str, str]] | None, list[str]]]:
            return self._applied(), self.changes.take()

        captured = publish_snapshot(events, self.directory / name, capture)
        assert captured is not None
        position, (subjects, ids) = captured
        erased = subjects is None and self._last is not None
        self.copy_seconds += time.perf_counter() - started
        self.published += 1
        now = time.time()
        manifest = SnapshotManifest(
            seq, name, str(events.path.parent), position.token, self._partitions,
            self._last.seq if self._last is not None else 0, subjects, ids, now, now,
            self.writer_url, os.getpid(), (self.directory / name).stat().st_size,
            self.published, round(self.copy_seconds, 6))
        manifest.write(self.directory)
        if self._last is not None:
            self._retired.append((time.monotonic(), self.directory / self._last.duckdb))
        self._last = manifest
        self._remove_retired(everything=erased)
        return manifest

    def _beat(self) -> None:
        last = self._last
        if last is None:
            return
        now = time.time()
        if now - last.heartbeat_at < self._heartbeat_s * 0.9:
            return
        beat = SnapshotManifest(**{**asdict(last), "heartbeat_at": now,
                                   "writer_url": self.writer_url})
        beat.write(self.directory)
        self._last = beat
        self._remove_retired()

    def _remove_retired(self, *, everything: bool = False) -> None:
        """Delete the snapshots replaced ``keep_s`` ago; ``everything`` replaced, after a
        forget's erase or purge: their bytes may hold what it erased (a reader that has one
        open reads it until its next swap, milliseconds later)."""
        cutoff = time.monotonic() if everything else time.monotonic() - self._keep_s
        while self._retired and self._retired[0][0] <= cutoff:
            _, path = self._retired.pop(0)
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".wal").unlink(missing_ok=True)
