"""``Eraser``: the physical phase of forgetting, in a background thread of the live worker.

The store thread hides a request (:meth:`ForgetProcessor.hide`: no read returns it) and hands
it here; the eraser takes every request waiting, purges them from every store in one pass
(:meth:`ForgetProcessor.erase`: only the fragments and row groups that held them are
rewritten), audits each and marks it applied. Ingest goes on meanwhile: the stores take the
eraser's commits next to the writer's (LanceDB commits are optimistic and retried; DuckDB
purges on its own connection).

The eraser builds its processor (``open_processor``) in its thread, again for each pass (the
stores that forget are decided when a processor is built: the consolidated weights join once
their checkpoints exist; the store thread builds one per batch too), and closes it when it
stops. A failed pass (a full disk) is retried after :attr:`retry_s` with every request still
waiting; nothing is marked applied before it is erased and audited, so a restart hides and
erases the unapplied requests again from the ledger.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from queue import Empty, SimpleQueue

from memstack.pipelines.forgetting.processor import ForgetOutcome, ForgetProcessor, Hidden

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.2


class Eraser:
    """Erases hidden requests in batches, in its own thread."""

    def __init__(self, open_processor: Callable[[], ForgetProcessor], *,
                 on_erased: Callable[[ForgetOutcome], None] | None = None,
                 exclusive: Callable[[], AbstractContextManager[None]] = nullcontext,
                 retry_s: float = 5.0, max_batch: int = 1000) -> None:
        """``exclusive``: held around each store's purge (the service's read gate; readers
        wait for a purge, ingest does not)."""
        self._open = open_processor
        self._exclusive = exclusive
        self._on_erased = on_erased
        self.retry_s = retry_s
        self.max_batch = max_batch
        self._inbox: SimpleQueue[Hidden] = SimpleQueue()
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._waiting = 0
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        """The last pass's error while it is being retried (None once a pass succeeds)."""
        self.passes = 0

    def start(self) -> Eraser:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="memstack-eraser",
                                            daemon=True)
            self._thread.start()
        return self

    def submit(self, hidden: Hidden) -> None:
        with self._idle:
            self._waiting += 1
        self._inbox.put(hidden)

    @property
    def waiting(self) -> int:
        """Requests hidden but not yet erased and audited."""
        with self._idle:
            return self._waiting

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Until every submitted request is erased and audited (True), or the timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._idle:
            while self._waiting:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left if left is not None else IDLE_POLL_S)
        return True

    def close(self, drain_s: float = 600.0) -> None:
        """Stop after erasing what is waiting (up to ``drain_s``); whatever is left is
        erased after a restart (the requests are not marked applied)."""
        if self._thread is None:
            return
        if not self.wait_idle(drain_s):
            log.warning("the eraser stops with %d request(s) hidden but not erased; they are "
                        "erased when the worker starts again", self.waiting)
        self._stop.set()
        self._thread.join()
        self._thread = None

    def _run(self) -> None:
        try:
            processor = self._open()
        except Exception as exc:
            self.failure = exc
            log.exception("the eraser could not open the stores; forget requests are hidden "
                          "but not erased until the worker restarts")
            raise
        try:
            carried: list[Hidden] = []
            while not self._stop.is_set():
                batch = carried + self._take(block=not carried)
                if not batch:
                    continue
                try:
                    processor = self._current(processor)
                except Exception as exc:  # as a failed pass: the requests stay hidden
                    self.failure = exc
                    log.exception("the eraser could not open the stores for %d forget "
                                  "request(s); retrying in %.0f s", len(batch), self.retry_s)
                    carried = batch
                    self._stop.wait(self.retry_s)
                    continue
                here = [h for h in batch if _same(h, processor)]
                if not here:  # hidden in other stores (the service switched): open those
                    processor.stores.close()
                    processor = self._open()
                    here = [h for h in batch if _same(h, processor)]
                    if not here:  # stores no longer served: a restart erases them there
                        log.error("%d forget request(s) were hidden in %s, which this worker "
                                  "no longer serves; they are erased there when a worker "
                                  "runs on those stores again", len(batch), batch[0].stores_dir)
                        self._done(len(batch))
                        carried = []
                        continue
                rest = [h for h in batch if not _same(h, processor)]
                carried = self._erase(processor, here) + rest
                if len(carried) > len(rest):
                    self._stop.wait(self.retry_s)
        finally:
            processor.stores.close()

    def _current(self, processor: ForgetProcessor) -> ForgetProcessor:
        """A processor built for this pass, as the store thread builds one for each batch: the
        stores that forget are decided when it is built (the consolidated weights join once
        their checkpoints exist), so one kept from the thread's start would erase, audit and
        mark applied without a store that joined since. ``processor`` is kept instead while
        the stores were switched (its requests are erased where they were hidden first)."""
        fresh = self._open()
        if fresh.stores.directory != processor.stores.directory:
            fresh.stores.close()
            return processor
        processor.stores.close()
        return fresh

    def _take(self, *, block: bool) -> list[Hidden]:
        batch: list[Hidden] = []
        try:
            if block:
                batch.append(self._inbox.get(timeout=IDLE_POLL_S))
            while len(batch) < self.max_batch:
                batch.append(self._inbox.get_nowait())
        except Empty:
            pass
        return batch

    def _erase(self, processor: ForgetProcessor, batch: list[Hidden]) -> list[Hidden]:
        """One pass; returns the batch when it failed (to retry), else nothing."""
        try:
            outcomes = processor.erase(batch, self._exclusive, self._stop.is_set)
        except Exception as exc:  # retried: the requests stay hidden meanwhile
            self.failure = exc
            log.exception("erasing %d forget request(s) failed; retrying in %.0f s (reads "
                          "already leave them out)", len(batch), self.retry_s)
            return batch
        self.failure = None
        self.passes += 1
        for outcome in outcomes:
            if self._on_erased is not None:
                try:
                    self._on_erased(outcome)
                except Exception:
                    log.exception("a hook after erasing %s failed", outcome.request.request_id)
        self._done(len(batch))
        return []

    def _done(self, n: int) -> None:
        with self._idle:
            self._waiting -= n
            self._idle.notify_all()


def _same(hidden: Hidden, processor: ForgetProcessor) -> bool:
    return hidden.stores_dir is None or hidden.stores_dir == processor.stores.directory
