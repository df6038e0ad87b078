"""The service started for a benchmark phase, and read throughput with 1 and 2 readers.

``read_throughput_readers_1`` / ``_2``: facts reads per second that :data:`CLIENTS` closed-loop
clients get (each on its own connection, so the kernel spreads them over the readers) from
``memstack serve --readers N`` over the stores the main run left, with no ingest;
``read_scaling_2_over_1`` is their ratio (issue #30's goal, >= 1.8, holds on >= 4 cores; on 2
cores the readers and the clients share the two, and the figure is reported without a goal).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import httpx

from memstack.foundation.settings import Settings
from memstack.jobs.bench.service.cost import Pids
from memstack.jobs.bench.service.load import KEY, TENANT, facts_of
from memstack.jobs.measure import Report

CLIENTS = 6
publishing: dict[str, float] = {}
"""What publishing snapshots cost the writer of the last :func:`served` with readers (read
from its manifest as it stopped): ``snapshots_published``, ``snapshot_ms_mean`` (checkpoint and
copy, under the index's lock: commits wait meanwhile) and ``snapshot_mb`` (the last one)."""


def _publishing(settings: Settings) -> dict[str, float]:
    from memstack.pipelines.service.snapshots import read_manifest, snapshot_dir

    found = read_manifest(snapshot_dir(settings))
    if found is None or not found.published:
        return {}
    return {"snapshots_published": float(found.published),
            "snapshot_ms_mean": 1000 * found.copy_s / found.published,
            "snapshot_mb": found.bytes / 2**20}


@contextmanager
def served(settings: Settings, readers: int, *extra: str) -> Iterator[tuple[str, Pids]]:
    """``memstack serve --readers N`` as a child until the block ends (SIGTERM); its URL and
    its processes (the writer and the readers it announced)."""
    from memstack.jobs.service import spawn_service

    log = settings.home / f"serve-readers-{readers}.log"
    child, url = spawn_service(settings, log, "--readers", str(readers), *extra,
                               env={"MEMSTACK_API_KEYS": f"{KEY}:{TENANT}"})
    path = settings.home / "service.json"

    def pids() -> Sequence[int]:
        found = json.loads(path.read_text())
        return [child.pid, *found.get("readers", [])]

    try:
        yield url, pids
        publishing.update(_publishing(settings))
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(120)


def throughput(url: str, seconds: float) -> float:
    """Facts reads per second of :data:`CLIENTS` closed-loop clients over ``seconds``."""
    stop = threading.Event()
    counts = [0] * CLIENTS
    errors: list[str] = []

    def loop(n: int) -> None:
        with httpx.Client(base_url=url, timeout=60.0,
                          headers={"Authorization": f"Bearer {KEY}"}) as client:
            i = n
            while not stop.is_set():
                answer = facts_of(client, i)
                if answer.status_code != 200:
                    errors.append(answer.text[:200])
                    return
                counts[n] += 1
                i += CLIENTS

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    if errors:
        raise AssertionError(f"reads failed: {errors[:3]}")
    return sum(counts) / seconds


def read_scaling(settings: Settings, seconds: float, report: Report) -> dict[str, float]:
    found: dict[str, float] = {}
    for readers in (1, 2):
        with served(settings, readers) as (url, _):
            throughput(url, 2.0)  # every reader up, subjects held
            found[f"read_throughput_readers_{readers}"] = rate = throughput(url, seconds)
            report("%d reader(s): %.0f facts reads/s from %d clients", readers, rate, CLIENTS)
    found["read_scaling_2_over_1"] = (found["read_throughput_readers_2"]
                                      / found["read_throughput_readers_1"])
    return found
