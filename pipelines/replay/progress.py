"""Replay progress: per-partition offset / end offset, events/s, ETA, stalled partitions.

The job's single writer emits a :class:`Progress` after every commit; the driver feeds them to
a :class:`ProgressTracker` and prints :meth:`ProgressTracker.render` every few seconds. The
tracker is pure (time is passed in), so its arithmetic is tested without a job.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from memstack.pipelines.replay.bounds import Bounds


@dataclass(frozen=True)
class Progress:
    """What the writer has committed so far (cumulative)."""

    positions: Mapping[int, int]
    """Per partition, the next offset the stores expect (the offsets committed with the data)."""
    applied: int
    forgotten: int
    dead_letters: int
    batches: int
    final: bool = False
    first_at: float = 0.0
    """Wall clock (epoch s) when processing began: the later of the first record read and the
    moment the last prepare worker was ready (model loaded). Rates from it leave start-up out:
    the replay benchmark's headline is over the whole job and reports this one apart."""
    at: float = 0.0
    """Wall clock (epoch s) of this report."""

    @property
    def processing_s(self) -> float:
        """Seconds from the start of processing to this report (JVM, worker and model start-up
        excluded: a figure of the processing alone, never the whole job's time)."""
        return max(0.0, self.at - self.first_at)

    def to_json(self) -> str:
        return json.dumps({"positions": {str(p): o for p, o in self.positions.items()},
                           "applied": self.applied, "forgotten": self.forgotten,
                           "dead_letters": self.dead_letters, "batches": self.batches,
                           "final": self.final, "first_at": self.first_at, "at": self.at})

    @classmethod
    def from_json(cls, text: str) -> Progress:
        body = json.loads(text)
        return cls({int(p): int(o) for p, o in body["positions"].items()}, int(body["applied"]),
                   int(body["forgotten"]), int(body["dead_letters"]), int(body["batches"]),
                   bool(body["final"]), float(body["first_at"]), float(body["at"]))


@dataclass
class ProgressTracker:
    """Rates over a sliding window; a partition is stalled when it has not moved for a while."""

    bounds: Bounds
    started: float
    window_s: float = 15.0
    stall_after_s: float = 30.0
    startup_grace_s: float = 90.0
    """No stall warnings before the first report within this long (JVM and workers start)."""
    latest: Progress | None = None
    _samples: deque[tuple[float, int]] = field(default_factory=deque)
    _moved: dict[int, tuple[float, int]] = field(default_factory=dict)

    def update(self, progress: Progress, now: float) -> None:
        self.latest = progress
        self._samples.append((now, self.done()))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.window_s:
            self._samples.popleft()
        for p, o in progress.positions.items():
            if self._moved.get(p, (0.0, -1))[1] != o:
                self._moved[p] = (now, o)

    def position(self, partition: int) -> int:
        start = self.bounds.start.get(partition, 0)
        if self.latest is None:
            return start
        return max(start, self.latest.positions.get(partition, start))

    def done(self) -> int:
        return sum(self.position(p) - self.bounds.start.get(p, 0) for p in self.bounds.partitions)

    def rate(self, now: float) -> float:
        """Offsets per second over the window (since the start before the second sample)."""
        if len(self._samples) >= 2:
            (t0, d0), (t1, d1) = self._samples[0], self._samples[-1]
            if t1 > t0:
                return (d1 - d0) / (t1 - t0)
        elapsed = now - self.started
        return self.done() / elapsed if elapsed > 0 else 0.0

    def eta_s(self, now: float) -> float | None:
        rate = self.rate(now)
        remaining = self.bounds.total() - self.done()
        if remaining <= 0:
            return 0.0
        return remaining / rate if rate > 0 else None

    def stalled(self, now: float) -> list[int]:
        """Partitions below their stop offset that have not moved for ``stall_after_s``."""
        out = []
        for p in self.bounds.partitions:
            if self.position(p) >= self.bounds.stop[p]:
                continue
            if self.latest is None and now - self.started < self.startup_grace_s:
                continue
            since = self._moved.get(p, (self.started, -1))[0]
            if now - since >= self.stall_after_s:
                out.append(p)
        return out

    def render(self, now: float) -> list[str]:
        parts = "  ".join(f"p{p} {self.position(p)}/{self.bounds.stop[p]}"
                          for p in self.bounds.partitions)
        eta = self.eta_s(now)
        eta_text = "?" if eta is None else f"{eta:.0f}s"
        applied = self.latest.applied if self.latest else 0
        lines = [f"replay {self.done()}/{self.bounds.total()} offsets  {parts}  "
                 f"{self.rate(now):.0f} ev/s  ETA {eta_text}  applied {applied}"]
        for p in self.stalled(now):
            lines.append(f"WARNING: partition {p} has not moved for "
                         f"{now - self._moved.get(p, (self.started, -1))[0]:.0f}s at offset "
                         f"{self.position(p)} (stop {self.bounds.stop[p]})")
        return lines
