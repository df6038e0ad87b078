"""``memstack bench service``: ingest through the live service while readers query it.

``memstack serve`` runs as a child process (worker + HTTP API, one process owning the stores)
on the broker of ``memstack.foundation.settings`` (started when none runs) with its own topic
prefix.
Events are posted over HTTP in batches of 64 (distinct texts, a fact every 8th) by one writer:

- ``events_per_s_alone``: posted events / time from the first POST until a read ``after=`` the
  last write's token returns (everything applied), with no reader; measured before and after
  the phase with readers, the better of the two (the best baseline on this machine);
- ``events_per_s_with_readers``: the same, while 4 threads query continuously (facts of a
  subject and hybrid search, alternately); ``facts_p50_ms_under_ingest`` and
  ``search_p50_ms_under_ingest`` are their latencies meanwhile;
- ``http_events_per_s``: posted events / time until the broker acknowledged the last POST
  (the HTTP write path alone, during the phase without readers);
- ``write_to_read_p50_s`` / ``_p99_s``: one event per POST at half the alone rate; time from
  the POST until a read with ``after=`` its token returns it;
- ``facts_p50_ms_idle`` / ``search_p50_ms_idle``: the 4 readers for 3 s with no ingest.

``ratio`` = with readers / alone (goal >= 0.8; write_to_read p99 <= 1.5 s; facts p50 under
ingest <= 10 ms).
"""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from memstack.foundation.settings import Settings
from memstack.jobs.bench.broker_env import scratch_deployment
from memstack.jobs.measure import Report, Result
from memstack.schemas.ids import uuid7

TENANT = "bench"
KEY = "bench-service-key-0001"
BATCH = 64
READERS = 4


SUBJECTS = ("the deploy", "Ana's flight", "the invoice", "a flaky test", "the garden", "lunch")
VERBS = ("moved to", "was postponed until", "depends on", "needs a review before", "is fine after")


def texts(n: int) -> list[str]:
    """Short agent-turn texts (10-20 words), deterministic and all different."""
    return [f"Turn {i}: the user says {SUBJECTS[i % len(SUBJECTS)]} "
            f"{VERBS[(i // 3) % len(VERBS)]} step {i % 17}, and asks me to remember it for "
            f"session {i % 5}." for i in range(n)]


def _event(i: int, text: str) -> dict[str, Any]:
    base = {"event_id": str(uuid7()), "tenant": TENANT, "agent": "bench",
            "session": f"s{i % 16}", "occurred_at": "2026-11-30T12:00:00Z",
            "provenance": {"source": "bench", "authority": "agent"}}
    if i % 8 == 7:
        return {**base, "kind": "fact_asserted", "subject": f"user:{i % 50}",
                "payload": {"relation": "works_on", "object": f"project {i}"}}
    return {**base, "kind": "message", "payload": {"role": "user", "text": text}}


@dataclass
class Readers:
    """4 threads querying facts and search until stopped; latencies per kind."""

    client: httpx.Client
    stop: threading.Event = field(default_factory=threading.Event)
    facts_ms: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def loop(self, n: int) -> None:
        i = n
        while not self.stop.is_set():
            i += READERS
            started = time.perf_counter()
            if i % 2:
                r = self.client.get(f"/v1/tenants/{TENANT}/facts",
                                    params={"subject": f"user:{i % 50}"})
                bucket = self.facts_ms
            else:
                r = self.client.get(f"/v1/tenants/{TENANT}/search",
                                    params={"text": f"step {i % 17} of the deploy", "k": 10})
                bucket = self.search_ms
            if r.status_code != 200:
                self.errors.append(f"{r.status_code} {r.text[:200]}")
            bucket.append((time.perf_counter() - started) * 1000)


def ingest(client: httpx.Client, events: list[dict[str, Any]]) -> tuple[float, float]:
    """(events/s until applied, events/s until acknowledged) for one burst."""
    started = time.perf_counter()
    tokens = []
    for i in range(0, len(events), BATCH):
        r = client.post(f"/v1/tenants/{TENANT}/events", json={"events": events[i:i + BATCH]})
        r.raise_for_status()
        tokens.append(r.json()["position"])
    acked = time.perf_counter() - started
    r = client.get(f"/v1/tenants/{TENANT}/records", params={"after": ".".join(tokens),
                                                            "limit": 1})
    r.raise_for_status()
    applied = time.perf_counter() - started
    return len(events) / applied, len(events) / acked


def write_to_read(client: httpx.Client, sample: list[str], rate: float) -> list[float]:
    """Seconds from each single-event POST to a read ``after=`` it that returns it."""

    def one(i: int) -> float:
        event = _event(2 * i, sample[i])  # even: a message
        started = time.perf_counter()
        r = client.post(f"/v1/tenants/{TENANT}/events", json={"events": [event]})
        r.raise_for_status()
        rows = client.get(f"/v1/tenants/{TENANT}/records", params={
            "after": r.json()["position"], "session": event["session"]}).json()["records"]
        if event["event_id"] not in {row["event_id"] for row in rows}:
            raise AssertionError(f"read after= did not return {event['event_id']}")
        return time.perf_counter() - started

    futures = []
    with ThreadPoolExecutor(16) as pool:
        started = time.perf_counter()
        for i in range(len(sample)):
            time.sleep(max(0.0, started + i / rate - time.perf_counter()))
            futures.append(pool.submit(one, i))
        return [f.result() for f in futures]


def _readers_alone(client: httpx.Client, seconds: float) -> tuple[float, float]:
    """Facts and search p50 (ms) of the 4 readers with nothing ingested meanwhile."""
    readers = Readers(client)
    threads = [threading.Thread(target=readers.loop, args=(n,)) for n in range(READERS)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    readers.stop.set()
    for t in threads:
        t.join()
    return statistics.median(readers.facts_ms), statistics.median(readers.search_ms)


def run(quick: bool, report: Report) -> Result:
    burst, paced = (256, 60) if quick else (1024, 300)
    with scratch_deployment(Settings.from_env()) as settings:
        return _measure(settings, burst, paced, report)


def _measure(settings: Settings, burst: int, paced: int, report: Report) -> Result:
    from memstack.jobs.service import spawn_service

    log = settings.home / "serve.log"
    extra = os.environ.get("MEMSTACK_BENCH_SERVE_ARGS", "").split()
    child, url = spawn_service(settings, log, "--after-timeout", "300", *extra,
                               env={"MEMSTACK_API_KEYS": f"{KEY}:{TENANT}"})
    report("service at %s (log %s)", url, log)
    try:
        with httpx.Client(base_url=url, timeout=300.0,
                          headers={"Authorization": f"Bearer {KEY}"},
                          limits=httpx.Limits(max_connections=32)) as client:
            return _phases(client, burst, paced, report)
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(120)


def _phases(client: httpx.Client, burst: int, paced: int, report: Report) -> Result:
    sample = texts(4 * burst + paced + 96)
    warm = [_event(i, sample[i]) for i in range(96)]
    ingest(client, warm)  # the Lance table and its first indexes, the model warmed
    report("warmed up with %d events", len(warm))

    def events(phase: int) -> list[dict[str, Any]]:
        offset = 96 + phase * burst
        return [_event(offset + i, sample[offset + i]) for i in range(burst)]

    idle = _readers_alone(client, 3.0)
    report("4 readers, no ingest: facts p50 %.1f ms, search p50 %.1f ms", *idle)
    alone_1, http_1 = ingest(client, events(0))
    report("alone: %.1f events/s applied, %.1f events/s acknowledged", alone_1, http_1)
    readers = Readers(client)
    threads = [threading.Thread(target=readers.loop, args=(n,)) for n in range(READERS)]
    for t in threads:
        t.start()
    try:
        with_readers, _ = ingest(client, events(1))
    finally:
        readers.stop.set()
        for t in threads:
            t.join()
    report("with %d readers: %.1f events/s; %d facts, %d searches, %d errors", READERS,
           with_readers, len(readers.facts_ms), len(readers.search_ms), len(readers.errors))
    if readers.errors:
        raise AssertionError(f"readers failed: {readers.errors[:3]}")
    alone_2, http_2 = ingest(client, events(2))
    report("alone again: %.1f events/s", alone_2)
    alone = max(alone_1, alone_2)
    rate = alone / 2
    latencies = write_to_read(client, sample[96 + 3 * burst:96 + 3 * burst + paced], rate)
    p50, p99 = np.percentile(latencies, [50, 99])
    report("write -> read at %.1f events/s: p50 %.3f s, p99 %.3f s", rate, p50, p99)
    figures = {
        "events_per_s_with_readers": with_readers, "events_per_s_alone": alone,
        "events_per_s_alone_before": alone_1, "events_per_s_alone_after": alone_2,
        "http_events_per_s": max(http_1, http_2),
        "write_to_read_p50_s": float(p50), "write_to_read_p99_s": float(p99),
        "write_to_read_rate_events_per_s": rate,
        "facts_p50_ms_under_ingest": statistics.median(readers.facts_ms),
        "search_p50_ms_under_ingest": statistics.median(readers.search_ms),
        "reads_under_ingest": float(len(readers.facts_ms) + len(readers.search_ms)),
        "facts_p50_ms_idle": idle[0], "search_p50_ms_idle": idle[1],
        "events": float(burst),
    }
    return Result("service", figures, ratio=with_readers / alone)
