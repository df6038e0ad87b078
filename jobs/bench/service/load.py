"""The service bench's load: the events it writes, bursts of ingest, closed-loop readers and
the write -> read latency (``memstack bench service``, :mod:`memstack.jobs.bench.service`)."""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from memstack.schemas.ids import uuid7

TENANT = "bench"
KEY = "bench-service-key-0001"
BATCH = 64
READERS = 4
FACT_SUBJECTS = 50
"""Facts are about ``user:0`` .. ``user:49``; the readers ask for them."""

SUBJECTS = ("the deploy", "Ana's flight", "the invoice", "a flaky test", "the garden", "lunch")
VERBS = ("moved to", "was postponed until", "depends on", "needs a review before", "is fine after")


def texts(n: int) -> list[str]:
    """Short agent-turn texts (10-20 words), deterministic and all different."""
    return [f"Turn {i}: the user says {SUBJECTS[i % len(SUBJECTS)]} "
            f"{VERBS[(i // 3) % len(VERBS)]} step {i % 17}, and asks me to remember it for "
            f"session {i % 5}." for i in range(n)]


def bench_event(i: int, text: str) -> dict[str, Any]:
    base = {"event_id": str(uuid7()), "tenant": TENANT, "agent": "bench",
            "session": f"s{i % 16}", "occurred_at": "2026-11-30T12:00:00Z",
            "provenance": {"source": "bench", "authority": "agent"}}
    if i % 8 == 7:
        return {**base, "kind": "fact_asserted", "subject": f"user:{i % FACT_SUBJECTS}",
                "payload": {"relation": "works_on", "object": f"project {i}"}}
    return {**base, "kind": "message", "payload": {"role": "user", "text": text}}


def facts_request(i: int) -> tuple[str, dict[str, str | int]]:
    """The ``i``-th facts read: its path and parameters."""
    return f"/v1/tenants/{TENANT}/facts", {"subject": f"user:{i % FACT_SUBJECTS}"}


def search_request(text: str) -> tuple[str, dict[str, str | int]]:
    return f"/v1/tenants/{TENANT}/search", {"text": text, "k": 10}


def facts_of(client: httpx.Client, i: int) -> httpx.Response:
    path, params = facts_request(i)
    return client.get(path, params=params)


def search(client: httpx.Client, text: str) -> httpx.Response:
    path, params = search_request(text)
    return client.get(path, params=params)


@dataclass
class Readers:
    """Closed loop: threads querying facts and search, alternately, until stopped."""

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
                r, bucket = facts_of(self.client, i), self.facts_ms
            else:
                r, bucket = search(self.client, f"step {i % 17} of the deploy"), self.search_ms
            if r.status_code != 200:
                self.errors.append(f"{r.status_code} {r.text[:200]}")
            bucket.append((time.perf_counter() - started) * 1000)

    def run(self, seconds: float | None = None) -> list[threading.Thread]:
        threads = [threading.Thread(target=self.loop, args=(n,)) for n in range(READERS)]
        for t in threads:
            t.start()
        if seconds is not None:
            time.sleep(seconds)
            self.join(threads)
        return threads

    def join(self, threads: list[threading.Thread]) -> None:
        self.stop.set()
        for t in threads:
            t.join()


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
    """Seconds from each single-event POST to a read ``after=`` it that returns it.

    Each event is the first of a session of its own, and the read is that session's records:
    an answer of one row whatever the store holds, so the figure is the time until the write
    is readable, not the cost of reading a long session (the bench's other sessions grow to
    ~700 records over a full run, and turning ~700 rows into JSON 120 times a second took
    most of the service's CPU, measured)."""

    def one(i: int) -> float:
        event = bench_event(2 * i, sample[i])  # even: a message
        event["session"] = f"write-to-read-{event['event_id']}"
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


def readers_alone(client: httpx.Client, seconds: float) -> tuple[float, float]:
    """Facts and search p50 (ms) of the closed-loop readers with nothing ingested meanwhile."""
    readers = Readers(client)
    readers.run(seconds)
    return statistics.median(readers.facts_ms), statistics.median(readers.search_ms)
