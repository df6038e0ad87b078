"""An open-loop read load: requests sent at a fixed offered rate, whatever the answers take.

Agents read on their own schedule, not as fast as the service answers; closed-loop readers
take every cycle they can get and measure the opposite. Each request of :class:`OpenLoad` is
due at ``start + i / rate``; a pool sends it then, and its latency runs from when it was due
(a request that waits for a free sender counts the wait: no coordinated omission).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

SENDERS = 32
"""Requests in flight at most per kind."""


@dataclass
class Stream:
    """One kind of request at one offered rate, with the latencies (ms) it saw."""

    rate: float
    read: Callable[[int], httpx.Response]
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        with ThreadPoolExecutor(SENDERS) as pool:
            start, i = time.perf_counter(), 0
            while not stop.is_set():
                due = start + i / self.rate
                time.sleep(max(0.0, due - time.perf_counter()))
                pool.submit(self._one, i, due)
                i += 1

    def _one(self, i: int, due: float) -> None:
        try:
            r = self.read(i)
            if r.status_code != 200:
                self.errors.append(f"{r.status_code} {r.text[:200]}")
        except httpx.HTTPError as exc:
            self.errors.append(repr(exc))
        self.latencies_ms.append((time.perf_counter() - due) * 1000)


class OpenLoad:
    """Streams sent until :meth:`stop` (use as a context manager around the ingest)."""

    def __init__(self, *streams: Stream) -> None:
        self.streams = streams
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=s.run, args=(self._stop,)) for s in streams]

    def __enter__(self) -> OpenLoad:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
