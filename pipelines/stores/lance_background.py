"""A thread that runs an index's maintenance when asked, so the writer never waits for it.

Index maintenance (building missing indexes, training IVF_PQ as the table grows, the bounded
compaction and index segments of each refresh) takes from a tenth of a second to many seconds,
growing with the table: at 10,000 rows the first IVF_PQ training took 3.0 s, measured in the
service while single-event writes came in at 120 a second. Run on the store thread, it holds
every batch behind it for that long. :class:`MaintenanceThread` runs it beside the writer
instead: the writer asks (:meth:`MaintenanceThread.poke`, a flag and an event: nothing waits),
and the thread runs one pass at a time, again at once if it was asked meanwhile. A pass that
fails is logged and tried again on the next request, or after :data:`RETRY_S`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

RETRY_S = 30.0
"""After a failed pass, the thread tries again after this long (or on the next request)."""
MAINTENANCE_JOIN_S = 120.0
"""How long closing waits for a pass in progress (an IVF_PQ training at 1M rows takes tens of
seconds here)."""


class MaintenanceThread:
    """Runs ``run`` in a daemon thread of its own, once per :meth:`poke` (requests that come
    while a pass runs are folded into one more pass)."""

    def __init__(self, run: Callable[[], Any], name: str) -> None:
        self._run = run
        self._name = name
        self._asked = threading.Event()
        self._guard = threading.Lock()
        self._pending = False
        self._stopping = threading.Event()
        self.failures = 0
        self.last_error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Ask for a pass (returns at once)."""
        with self._guard:
            self._pending = True
        self._asked.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self, timeout_s: float = MAINTENANCE_JOIN_S) -> None:
        """Stop once the pass in progress, and one asked for since, are done (waiting at most
        ``timeout_s``): closed stores are maintained as the inline maintenance left them."""
        self._stopping.set()
        self._asked.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("%s: a maintenance pass still runs after %.0f s; leaving it to finish "
                        "with the process (each Lance commit is atomic)", self._name, timeout_s)

    def _loop(self) -> None:
        while True:
            if not self._stopping.is_set():
                self._asked.wait(RETRY_S if self.last_error is not None else None)
            self._asked.clear()
            with self._guard:
                pending, self._pending = self._pending, False
            if pending or (self.last_error is not None and not self._stopping.is_set()):
                self._pass()  # then look again: a poke during the pass asks for one more
            elif self._stopping.is_set():
                return

    def _pass(self) -> None:
        started = time.perf_counter()
        try:
            self._run()
            self.last_error = None
        except Exception as exc:  # logged and retried: the writer must not stop for it
            self.failures += 1
            self.last_error = exc
            log.error("%s failed after %.1f s (retried on the next write, or in %.0f s): %s",
                      self._name, time.perf_counter() - started, RETRY_S, exc, exc_info=exc)
