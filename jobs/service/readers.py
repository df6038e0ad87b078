"""The writer's side of ``memstack serve --readers N``: reader processes started on the
service's listening socket, restarted when one dies, stopped (SIGTERM) with the service.

Each reader (:mod:`memstack.jobs.service.reader`) inherits the listening socket, so the
kernel hands each new connection to one of them; the writer itself listens on a loopback port
of its own, where the readers forward writes, forgets and the change feed. Their logs go to
``$MEMSTACK_HOME/service/reader-<i>.log``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from memstack.pipelines.service.snapshots import SnapshotPublisher
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex

if TYPE_CHECKING:
    from memstack.foundation.log_coordinates import Position
    from memstack.foundation.settings import Settings
    from memstack.pipelines.stores.base import EventIndex

log = logging.getLogger(__name__)

RESTART_BACKOFF_S = 1.0


class ReaderProcesses:
    """N reader processes over one listening socket (see the module)."""

    def __init__(self, count: int, sock: socket.socket, snapshots: Path, log_dir: Path,
                 env: dict[str, str], args: list[str]) -> None:
        self.count = count
        self._sock = sock
        self._snapshots = snapshots
        self._log_dir = log_dir
        self._env = env
        self._args = args
        self._children: list[subprocess.Popen[bytes] | None] = [None] * count
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self.restarts = 0

    def start(self) -> None:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        os.set_inheritable(self._sock.fileno(), True)
        for i in range(self.count):
            self._children[i] = self._spawn(i)
        self._watcher = threading.Thread(target=self._watch, name="reader-watch", daemon=True)
        self._watcher.start()
        log.info("started %d reader process(es) on the service's socket: pids %s", self.count,
                 self.pids())

    def pids(self) -> list[int]:
        return [c.pid for c in self._children if c is not None]

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        fd = self._sock.fileno()
        argv = [sys.executable, "-m", "memstack.jobs.service.reader", "--fd", str(fd),
                "--snapshots", str(self._snapshots), "--writer-pid", str(os.getpid()),
                *self._args]
        with (self._log_dir / f"reader-{index}.log").open("ab") as out:
            return subprocess.Popen(argv, env=self._env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=out, pass_fds=(fd,))

    def _watch(self) -> None:
        while not self._stopping.wait(0.5):
            for i, child in enumerate(self._children):
                if child is None or child.poll() is None or self._stopping.is_set():
                    continue
                log.warning("reader process %d (pid %d) exited with %s; starting another",
                            i, child.pid, child.returncode)
                time.sleep(RESTART_BACKOFF_S)
                if not self._stopping.is_set():
                    self._children[i] = self._spawn(i)
                    self.restarts += 1

    def terminate(self) -> None:
        """SIGTERM every reader (each drains its requests); returns at once."""
        self._stopping.set()
        for child in self._children:
            if child is not None and child.poll() is None:
                child.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = 20.0) -> None:
        """:meth:`terminate`, then wait, and SIGKILL what is left after ``timeout_s``."""
        self.terminate()
        alive = [c for c in self._children if c is not None and c.poll() is None]
        deadline = time.monotonic() + timeout_s
        for child in alive:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("reader pid %d did not stop in %.0f s; killing it", child.pid,
                            timeout_s)
                child.kill()
                child.wait()
        if self._watcher is not None:
            self._watcher.join(timeout=5)


class ReadersOfWriter:
    """What ``--readers N`` adds to the writer process: the snapshot publisher and the reader
    processes, started once the service listens and stopped before it."""

    def __init__(self, publisher: SnapshotPublisher, processes: ReaderProcesses) -> None:
        self.publisher = publisher
        self.processes = processes
        self._started = False

    @classmethod
    def of(cls, settings: Settings, count: int, sock: socket.socket,
           events: Callable[[], EventIndex], applied: Callable[[], Position],
           partitions: Position, reader_args: list[str]) -> ReadersOfWriter:
        from memstack.jobs.run import worker_env
        from memstack.pipelines.service.snapshots import snapshot_dir

        def duckdb() -> DuckDBEventIndex:
            found = events()
            if not isinstance(found, DuckDBEventIndex):
                raise TypeError(f"reader processes need the DuckDB event index, not "
                                f"{type(found).__name__}")
            return found

        directory = snapshot_dir(settings)
        publisher = SnapshotPublisher(directory, duckdb, applied, partitions)
        processes = ReaderProcesses(count, sock, directory, settings.home / "service",
                                    worker_env(settings), reader_args)
        return cls(publisher, processes)

    def start(self, writer_url: str) -> None:
        """Publish the first snapshot (readers start on it, and readers a killed writer left
        behind forward to ``writer_url`` from then on), then start the readers."""
        self.publisher.writer_url = writer_url
        self.publisher.start()  # publishes the first snapshot before it returns
        self.processes.start()
        self._started = True

    def wake(self, *_: object) -> None:
        self.publisher.wake()

    def draining(self) -> None:
        """The service stops: the readers stop taking connections and drain (the writer
        still answers what they forward)."""
        if self._started:
            self.processes.terminate()

    def stop(self) -> None:
        if self._started:
            self._started = False
            self.processes.stop()
            self.publisher.close()
            log.info("readers stopped: %d snapshots published (%.2f s copying), %d reader "
                     "restart(s)", self.publisher.published, self.publisher.copy_seconds,
                     self.processes.restarts)
