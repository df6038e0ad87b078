"""What one read costs the service: its CPU from ``/proc/<pid>/stat``, idle background out.

The service is one process (``memstack serve``: the worker, the HTTP API, the encoder's
threads), or that process and its reader processes (``--readers N``): the ``utime + stime`` of
them all over many sequential keep-alive reads, less what they burn idle over the same time
(measured just before, over :data:`IDLE_S`, once the service is quiet: its index maintenance
runs beside the writer and is not a read's cost), divided by the reads, is the CPU one read
takes from the machine's cores, HTTP included.

A search embeds its text first. ``search_cpu_ms`` leaves that out: every search of the run asks
a text never asked before (the service's encoder caches texts), and the same texts are embedded
here, in this process, by the same encoder (``MEMSTACK_ENCODER``, its default threads), one at
a time as the service does; their CPU per text (``search_encoding_cpu_ms``) is subtracted from
the service's CPU per search (``search_cpu_ms_with_encoding``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from memstack.jobs.bench.cpu_share import stat_cpu_s
from memstack.jobs.bench.service.load import FACT_SUBJECTS, facts_of, search

IDLE_S = 2.0
"""How long the service's idle background is measured before each cost phase."""
QUIET_MS_PER_S = 100.0
"""A service using less CPU than this per second is quiet (idle it uses ~25 ms/s here)."""
SETTLE_MAX_S = 180.0
"""How long a cost phase waits at most for the service to be quiet."""


Pids = Callable[[], Sequence[int]]
"""The service's processes now (the writer, and its readers: a restarted reader is a new pid)."""


def cpu_s(pids: Sequence[int]) -> float:
    """The processes' CPU seconds so far (user + system, every thread); they must run."""
    return sum(stat_cpu_s(f"/proc/{pid}/stat") for pid in pids)


@dataclass(frozen=True)
class Cost:
    """Service CPU per read (ms, idle out) and the reads' wall-clock latency."""

    cpu_ms: float
    p50_ms: float
    idle_ms_per_s: float


def settle(pids: Sequence[int]) -> float:
    """Wait until the service is quiet (its store's index maintenance, which runs beside the
    writer, done): whole seconds under :data:`QUIET_MS_PER_S`, at most :data:`SETTLE_MAX_S`.
    Returns the seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < SETTLE_MAX_S:
        before = cpu_s(pids)
        time.sleep(1.0)
        if (cpu_s(pids) - before) * 1000 < QUIET_MS_PER_S:
            break
    return time.perf_counter() - started


def measure(pids_of: Pids, reads: int, read: Callable[[int], httpx.Response]) -> Cost:
    """``reads`` sequential calls of ``read(i)`` on a quiet service (:func:`settle`); each must
    answer 200."""
    pids = pids_of()
    settle(pids)
    before = cpu_s(pids)
    time.sleep(IDLE_S)
    idle = (cpu_s(pids) - before) / IDLE_S
    latencies = []
    started, before = time.perf_counter(), cpu_s(pids)
    for i in range(reads):
        t = time.perf_counter()
        read(i).raise_for_status()
        latencies.append((time.perf_counter() - t) * 1000)
    elapsed, used = time.perf_counter() - started, cpu_s(pids) - before
    return Cost(1000 * max(0.0, used - idle * elapsed) / reads, statistics.median(latencies),
                1000 * idle)


def facts_cost(client: httpx.Client, pid: Pids, reads: int) -> Cost:
    """A subject's current facts, the subjects in turn (each read once before)."""
    for i in range(FACT_SUBJECTS):
        facts_of(client, i).raise_for_status()
    return measure(pid, reads, lambda i: facts_of(client, i))


def search_texts(n: int, tag: str) -> list[str]:
    """``n`` query texts never asked before in this run (``tag`` tells runs apart)."""
    return [f"what did the user say about step {i % 17} of the deploy ({tag} {i})?"
            for i in range(n)]


def encoding_cpu_ms(texts: list[str]) -> float:
    """CPU per text of embedding ``texts`` one at a time here, with the service's encoder."""
    from memstack.pipelines.embedding import make_encoder

    encoder = make_encoder().load()
    encoder.encode(["warm the model up"])
    before = time.process_time()
    for text in texts:
        encoder.encode([text])
    return 1000 * (time.process_time() - before) / len(texts)


def search_cost(client: httpx.Client, pid: Pids, reads: int, tag: str = "cost"
                ) -> tuple[Cost, float]:
    """Hybrid searches of new texts (``tag`` tells runs apart): their cost, and the
    encoding's CPU per text."""
    search(client, f"warm the search path up ({tag})").raise_for_status()
    texts = search_texts(reads, tag)
    cost = measure(pid, reads, lambda i: search(client, texts[i]))
    return cost, encoding_cpu_ms(texts)
