"""A read/write gate over the stores: reads share it, a forget takes it alone.

Batches commit while reads run (DuckDB cursors, Lance versions), but a forget closes the
stores, rewrites their files and reopens them; reads must not run meanwhile. Readers hold the
gate shared for one query; the forget waits for them to finish and, while it waits, no new
reader enters (writer preference, so 4 busy readers cannot starve a forget).

The gate also bounds how many reads run at once (``max_readers``): the worker's store thread
shares the interpreter lock and the cores with the readers, and every reader beyond a few
takes its share from ingest without answering faster (docs/service.md, measured).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadWriteGate:
    """Up to ``max_readers`` readers or one writer; a waiting writer blocks new readers."""

    def __init__(self, max_readers: int = 1 << 20, max_heavy: int | None = None) -> None:
        self._max_readers = max_readers
        self._max_heavy = max_readers if max_heavy is None else max_heavy
        self._cond = threading.Condition()
        self._readers = 0
        self._heavy = 0
        self._writing = False
        self._writers_waiting = 0

    @contextmanager
    def reading(self, heavy: bool = False) -> Iterator[None]:
        """Hold the gate for one read; ``heavy`` reads (search, context) have a smaller bound,
        so cheap reads (facts, records) do not queue behind them."""
        with self._cond:
            while (self._writing or self._writers_waiting or self._readers >= self._max_readers
                   or (heavy and self._heavy >= self._max_heavy)):
                self._cond.wait()
            self._readers += 1
            self._heavy += heavy
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._heavy -= heavy
                self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writing or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()
