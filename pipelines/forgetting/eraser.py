"""``BackgroundEraser``: the physical phase of forgetting on its own thread.

The writer thread hides a request (:meth:`ForgetProcessor.hide`, milliseconds: the logical
phase) and submits it; this thread takes every request submitted so far as one batch, erases
them in one pass per store (:meth:`ForgetProcessor.erase`) and audits each. Ingest keeps
committing meanwhile: the stores hold their writer locks only for the short steps that need
them (DuckDB's checkpoint and shred, Lance's history cleanup), not for the file rewrites.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from queue import Empty, SimpleQueue

from memstack.pipelines.forgetting.processor import ForgetOutcome, ForgetProcessor, Hidden

log = logging.getLogger(__name__)

OnErased = Callable[[list[ForgetOutcome]], None]


class BackgroundEraser:
    """Erases and audits hidden requests in batches, on a daemon thread."""

    def __init__(self, processor: ForgetProcessor, *, on_erased: OnErased | None = None,
                 gather_s: float = 0.05) -> None:
        self.processor = processor
        self._on_erased = on_erased
        self._gather_s = gather_s
        self._queue: SimpleQueue[Hidden | None] = SimpleQueue()
        self._pending = 0
        self._lock = threading.Condition()
        self.failure: BaseException | None = None
        self.outcomes: list[ForgetOutcome] = []
        self._thread = threading.Thread(target=self._run, name="memstack-eraser", daemon=True)
        self._thread.start()

    def submit(self, hidden: Hidden) -> None:
        if self.failure is not None:
            raise RuntimeError("the background eraser failed; restart the worker (requests "
                               "not yet erased are applied again)") from self.failure
        with self._lock:
            self._pending += 1
        self._queue.put(hidden)

    def idle(self) -> bool:
        """True when every submitted request is erased and audited."""
        with self._lock:
            return self._pending == 0

    def wait(self, timeout: float | None = None) -> bool:
        """Block until idle (or ``timeout``); True when idle."""
        with self._lock:
            return self._lock.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Finish what was submitted, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first, *self._gather()]
            stop = None in batch
            work = [h for h in batch if h is not None]
            try:
                outcomes = self.processor.erase(work)
            except BaseException as exc:
                log.exception("physical erasure of %d request(s) failed", len(work))
                self.failure = exc
                outcomes = []
            self.outcomes += outcomes
            if outcomes and self._on_erased is not None:
                self._on_erased(outcomes)
            with self._lock:
                self._pending -= len(work)
                self._lock.notify_all()
            if stop:
                return

    def _gather(self) -> list[Hidden | None]:
        """Every request submitted by now (after a short wait for ones arriving together)."""
        out: list[Hidden | None] = []
        try:
            out.append(self._queue.get(timeout=self._gather_s))
            while True:
                out.append(self._queue.get_nowait())
        except Empty:
            return out
