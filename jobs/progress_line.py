"""One progress line on stderr every few seconds: done / total, rate and ETA."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressLine:
    """``what done/total unit  rate/s  ETA  extra`` at most every ``every_s`` seconds."""

    def __init__(self, what: str, total: int | None, unit: str = "records", *,
                 every_s: float = 2.0, stream: TextIO | None = None) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.every_s = every_s
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._last = 0.0

    def update(self, done: int, extra: str = "", *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        print(self.render(done, now, extra), file=self.stream, flush=True)

    def render(self, done: int, now: float, extra: str = "") -> str:
        elapsed = max(now - self.started, 1e-9)
        rate = done / elapsed
        count = f"{done}/{self.total}" if self.total is not None else str(done)
        eta = ""
        if self.total is not None and rate > 0:
            eta = f"  ETA {max(0.0, (self.total - done) / rate):.0f}s"
        tail = f"  {extra}" if extra else ""
        return f"{self.what} {count} {self.unit}  {rate:.0f}/s{eta}{tail}"
