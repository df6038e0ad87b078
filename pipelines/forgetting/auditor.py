"""``Auditor``: the audits of purged forget requests, in a background thread of the live worker.

By default the live worker's store thread hides a batch of requests and purges it (both phases:
no read returns the content, no store keeps its bytes) and hands the audits here: they only
read, and at about a second each at a million rows (a hundred requests taken together: minutes)
they need not hold ingest. Each audit runs inside ``LiveForgetting.serial()`` (no purge or hide
meanwhile: a DuckDB ``CHECKPOINT`` is skipped, silently, while a reader holds a transaction;
the readers' gate is not held),
then the request is marked applied (``forget_applied.json``) and ``on_audited`` runs (the
change feed's ``forgotten``, metrics).

A failed audit (the broker away while the log is read again) is retried after
:attr:`Auditor.retry_s`, up to :data:`ATTEMPTS` times in a row; a stopping worker lets the
auditor finish what is waiting (up to its drain time); what is left is not marked applied, so
a restart hides, purges (nothing left: a no-op) and audits it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from memstack.pipelines.forgetting.processor import ForgetOutcome, ForgetProcessor, Purged

log = logging.getLogger(__name__)

ATTEMPTS = 3
"""Failed attempts in a row before a request's audit is left to the next start."""


class Auditor:
    """Audits purged batches in order, one request at a time, in its own thread."""

    def __init__(self, *, on_audited: Callable[[ForgetOutcome], None] | None = None,
                 exclusive: Callable[[], AbstractContextManager[None]] = nullcontext,
                 retry_s: float = 5.0) -> None:
        self._on_audited = on_audited
        self._exclusive = exclusive
        self.retry_s = retry_s
        self._queue: deque[tuple[ForgetProcessor, Purged, int]] = deque()
        self._cond = threading.Condition()
        self._busy = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        """The last audit's error while it is being retried (None once one succeeds)."""

    def submit(self, processor: ForgetProcessor, purged: Purged) -> None:
        """Audit every request of ``purged`` (with ``processor``, which purged it)."""
        if not purged.batch:
            return
        with self._cond:
            self._queue.append((processor, purged, 0))
            self._cond.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="memstack-auditor",
                                            daemon=True)
            self._thread.start()

    @property
    def waiting(self) -> int:
        """Requests purged but not yet audited."""
        with self._cond:
            return self._busy + sum(len(p.batch) - i for _, p, i in self._queue)

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Until every submitted request is audited (True), or the timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is not None else 0.2)
        return True

    def close(self, drain_s: float = 120.0) -> None:
        """Stop after auditing what is waiting (up to ``drain_s``); the rest is audited after a
        restart (not marked applied)."""
        if self._thread is None:
            return
        if not self.wait_idle(drain_s):
            log.warning("the auditor stops with %d forget request(s) purged but not audited; "
                        "they are audited when the worker starts again", self.waiting)
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join()
        self._thread = None

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            with self._cond:
                while not self._queue and not self._stop.is_set():
                    self._cond.wait(0.2)
                if self._stop.is_set():
                    return
                processor, purged, first = self._queue.popleft()
                self._busy = len(purged.batch) - first
            done = self._audit(processor, purged, first)
            failures = 0 if done else failures + 1
            left = len(purged.batch) - first - done
            if left and failures >= ATTEMPTS:  # e.g. the stores were switched and closed
                log.error("giving up on auditing %d forget request(s) after %d attempts; they "
                          "are audited when the worker starts again", left, failures)
                left, failures = 0, 0
            with self._cond:
                self._busy = 0
                if left:  # failed or stopping: again, first
                    self._queue.appendleft((processor, purged, first + done))
                self._cond.notify_all()
            if left:
                self._stop.wait(self.retry_s)

    def _audit(self, processor: ForgetProcessor, purged: Purged, first: int) -> int:
        """Audits from ``first`` on; returns how many were audited."""
        done = 0
        try:
            for i in range(first, len(purged.batch)):
                if self._stop.is_set():
                    break
                outcome = processor.audit_one(purged, i, self._exclusive)
                done += 1
                with self._cond:
                    self._busy -= 1
                self._hook(outcome)
            self.failure = None
        except Exception as exc:  # retried: the requests are hidden and purged meanwhile
            self.failure = exc
            log.exception("auditing a forget request failed; retrying in %.0f s (its content "
                          "is already gone from reads and from the files)", self.retry_s)
        return done

    def _hook(self, outcome: ForgetOutcome) -> None:
        if self._on_audited is None:
            return
        try:
            self._on_audited(outcome)
        except Exception:
            log.exception("a hook after auditing %s failed", outcome.request.request_id)
