"""Is the service applying what it acknowledges? ``/healthz`` and ``/readyz`` ask here.

A service acknowledges a write once the broker has it, and reads ``after=`` it wait until the
worker applied it. If the worker cannot (another process holds the partition, the worker is
stuck), every such read times out while a plain liveness check still said ``ok`` (found by a
hostile test). So the writer reports each acknowledged offset here, and a check compares them
with the applied offsets and the worker's assignment, all in memory (cheap):

- a partition is **stuck** when writes acknowledged to it have waited ``stuck_after_s`` (the
  service's ``after=`` timeout) with no progress of its applied offset;
- a partition is **unassigned** when the worker has not held it for ``unassigned_after_s``
  (a single owner holds every partition; a rebalance takes a few seconds).

Either makes the service **failing** (``/healthz`` 503, naming the partitions, their applied
and acknowledged offsets and lag). **Ready** (``/readyz`` 200) asks more: listening, not
draining, not failing, every partition assigned and at most ``ready_max_lag`` records behind
the log's high-water marks the consumer last saw.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from memstack.foundation.log_coordinates import HasOffset, advance

STUCK_AFTER_S = 30.0
UNASSIGNED_AFTER_S = 15.0
READY_MAX_LAG = 1000


@dataclass(frozen=True)
class HealthReport:
    failing: dict[int, dict[str, Any]]
    """Per failing partition: why, ``assigned``, ``applied``, ``acknowledged``, ``lag``."""
    lag: int
    """Records behind the high-water marks (or acknowledged offsets) over every partition."""
    ready: bool
    reasons: tuple[str, ...]
    """Why not ready (empty when ready)."""

    def healthz(self) -> dict[str, Any]:
        body: dict[str, Any] = {"status": "failing" if self.failing else "ok"}
        if self.failing:
            body["partitions"] = {f"p{p}": why for p, why in sorted(self.failing.items())}
            body["lag"] = self.lag
        return body

    def readyz(self) -> dict[str, Any]:
        body: dict[str, Any] = {"status": "ready" if self.ready else "not ready",
                                "lag": self.lag}
        if self.reasons:
            body["reasons"] = list(self.reasons)
        return body


class ServiceHealth:
    """Acknowledged offsets in, :class:`HealthReport` out (thread-safe)."""

    def __init__(self, partitions: Iterable[int], applied: Callable[[], Mapping[int, int]],
                 assigned: Callable[[], set[int] | None],
                 highwater: Callable[[], Mapping[int, int]], *,
                 stopping: Callable[[], bool] = lambda: False,
                 stuck_after_s: float = STUCK_AFTER_S,
                 unassigned_after_s: float = UNASSIGNED_AFTER_S,
                 ready_max_lag: int = READY_MAX_LAG,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.partitions = sorted(partitions)
        self._applied = applied
        self._assigned = assigned
        self._highwater = highwater
        self._stopping = stopping
        self.stuck_after_s = stuck_after_s
        self.unassigned_after_s = unassigned_after_s
        self.ready_max_lag = ready_max_lag
        self._clock = clock
        self._lock = threading.Lock()
        self._acked: dict[int, int] = {}
        self._waiting: dict[int, float] = {}  # since when acknowledged records wait, per p
        self._progress: dict[int, tuple[int, float]] = {}  # applied offset, when last moved
        self._unassigned: dict[int, float] = {}
        self.started = False
        """Set once the API listens."""

    def acknowledged(self, written: Iterable[HasOffset]) -> None:
        """The writer's acknowledged records (call after each write)."""
        now = self._clock()
        with self._lock:
            for w in written:
                advance(self._acked, w.partition, w.offset)
                self._waiting.setdefault(w.partition, now)

    def report(self) -> HealthReport:
        now = self._clock()
        applied, assigned = dict(self._applied()), self._assigned()
        failing: dict[int, dict[str, Any]] = {}
        with self._lock:
            for p in self.partitions:
                why = self._partition(p, applied.get(p, 0), assigned, now)
                if why is not None:
                    failing[p] = why
            acked = dict(self._acked)
        high = dict(self._highwater())
        lag = sum(max(0, max(high.get(p, 0), acked.get(p, 0)) - applied.get(p, 0))
                  for p in self.partitions)
        reasons = [r for r, bad in (
            ("starting", not self.started), ("draining", self._stopping()),
            ("failing", bool(failing)),
            ("partitions not assigned", assigned is None or not set(self.partitions) <= assigned),
            (f"lag {lag} > {self.ready_max_lag}", lag > self.ready_max_lag)) if bad]
        return HealthReport(failing, lag, not reasons, tuple(reasons))

    def _partition(self, p: int, applied: int, assigned: set[int] | None,
                   now: float) -> dict[str, Any] | None:
        held = assigned is not None and p in assigned
        if held:
            self._unassigned.pop(p, None)
        else:
            self._unassigned.setdefault(p, now)
        acked = self._acked.get(p, 0)
        if acked <= applied:
            self._waiting.pop(p, None)
            self._progress[p] = (applied, now)
        elif self._progress.get(p, (None, 0.0))[0] != applied:
            self._progress[p] = (applied, now)  # it moved: the clock starts again
        why = []
        if acked > applied:
            since = max(self._waiting.get(p, now), self._progress[p][1])
            if now - since > self.stuck_after_s:
                why.append(f"acknowledged records not applied for {now - since:.0f} s")
        if not held and now - self._unassigned[p] > self.unassigned_after_s:
            why.append(f"not assigned to this service for {now - self._unassigned[p]:.0f} s "
                       "(another member of its consumer group holds it?)")
        if not why:
            return None
        return {"why": "; ".join(why), "assigned": held, "applied": applied,
                "acknowledged": acked, "lag": max(0, acked - applied)}
