"""``memstack bench service``: what a read costs the live service, and what reads at a fixed
offered rate do to ingest.

``memstack serve`` runs as a child process (worker + HTTP API, one process owning the stores)
on the broker of ``memstack.foundation.settings`` (started when none runs) with its own topic
prefix. Events are posted over HTTP in batches of 64 (distinct texts, a fact every 8th, about
``user:0`` .. ``user:49``) by one writer. Figures:

- ``facts_cpu_ms`` / ``search_cpu_ms``: the service's CPU per read (``/proc/<pid>/stat``,
  idle background subtracted), HTTP included, over many sequential keep-alive reads with no
  ingest (:mod:`.cost`); a search's without the embedding of its text
  (``search_encoding_cpu_ms``, measured here with the same encoder, is subtracted from
  ``search_cpu_ms_with_encoding``). ``search_cpu_ms`` is measured last, once more events
  have grown the store to ``search_records`` records (100,000; ``--quick``: 10,000);
  ``search_cpu_ms_small`` (and its ``_with_encoding``) at the start (~100 records);
  ``facts_p50_ms_idle`` / ``search_p50_ms_idle``: their latency meanwhile;
- ``events_per_s_alone``: posted events / time from the first POST until a read ``after=`` the
  last write's token returns (everything applied), with no reader; measured before and after
  the phases with readers, the better of the two; ``http_events_per_s``: until the broker
  acknowledged the last POST;
- open loop (:mod:`.open_loop`): a burst ingested while 200 facts reads/s and 20 searches/s
  (new texts) are offered: ``ingest_ratio_open_loop`` (events/s with that load / alone),
  ``facts_p50_ms_under_ingest``, ``facts_p99_ms_under_ingest``, ``search_p50_ms_under_ingest``
  (latency from when each request was due); the same with the facts reads alone:
  ``ingest_ratio_open_loop_facts_only``, ``facts_p50_ms_under_ingest_facts_only``,
  ``facts_p99_ms_under_ingest_facts_only``;
- closed loop (secondary): a burst ingested while 4 threads query continuously (facts and
  hybrid search, alternately): ``ratio_closed_loop``, ``events_per_s_with_readers``,
  ``facts_p50_ms_closed_loop``, ``search_p50_ms_closed_loop``;
- ``write_to_read_p50_s`` / ``_p99_s``: one event per POST at half the alone rate; time from
  the POST until a read with ``after=`` its token returns it.

- with ``MEMSTACK_BENCH_READERS=N`` the service runs ``--readers N`` (default 0): the CPU
  per read counts the writer and its readers, and ``readers``, ``snapshots_published``,
  ``snapshot_ms_mean``, ``snapshot_mb`` are added; every run ends with the read throughput
  with 1 and 2 readers (:mod:`.scaling`).

The result's ``ratio`` is ``ingest_ratio_open_loop``. Goals (issue #30): facts_cpu_ms <= 0.5,
search_cpu_ms <= 3 (at 100k records), ingest_ratio_open_loop >= 0.9, facts p50/p99 under
ingest <= 2/10 ms, search p50 under ingest <= 30 ms, write_to_read_p99_s <= 0.5.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import httpx
import numpy as np

from memstack.foundation.settings import Settings
from memstack.jobs.bench.broker_env import scratch_deployment
from memstack.jobs.bench.service import cost, scaling
from memstack.jobs.bench.service.load import (
    KEY,
    Readers,
    bench_event,
    facts_of,
    ingest,
    readers_alone,
    search,
    texts,
    write_to_read,
)
from memstack.jobs.bench.service.open_loop import OpenLoad, Stream
from memstack.jobs.measure import Report, Result

DEFAULT_READERS = 0
"""Reader processes of the main run (``MEMSTACK_BENCH_READERS`` overrides): the service's
default, so the headline is what a user gets without flags."""
FACTS_RATE = 200.0
SEARCH_RATE = 20.0
WARM = 96


SEARCH_RECORDS = 100_000
"""``search_cpu_ms`` is measured once the store holds this many records (``--quick``: 10,000)."""


def run(quick: bool, report: Report) -> Result:
    burst, paced, reads = (256, 60, 500) if quick else (1024, 300, 3000)
    readers = int(os.environ.get("MEMSTACK_BENCH_READERS", str(DEFAULT_READERS)))
    size = SEARCH_RECORDS // 10 if quick else SEARCH_RECORDS
    with scratch_deployment(Settings.from_env()) as settings:
        result = _measure(settings, readers, burst, paced, reads, size, report)
        result.figures |= scaling.read_scaling(settings, 3.0 if quick else 10.0, report)
        return result


def _measure(settings: Settings, readers: int, burst: int, paced: int, reads: int, size: int,
             report: Report) -> Result:
    extra = os.environ.get("MEMSTACK_BENCH_SERVE_ARGS", "").split()
    with scaling.served(settings, readers, "--after-timeout", "300", *extra) as (url, pids):
        report("service at %s (processes %s, %d reader(s))", url, pids(), readers)
        with httpx.Client(base_url=url, timeout=300.0,
                          headers={"Authorization": f"Bearer {KEY}"},
                          limits=httpx.Limits(max_connections=64)) as client:
            result = _phases(client, pids, burst, paced, reads, report)
            posted = WARM + 5 * burst + paced
            result.figures |= _search_at_size(client, pids, size, posted, reads, report)
    result.figures |= {"readers": float(readers), **scaling.publishing}
    return result


def _phases(client: httpx.Client, pid: cost.Pids, burst: int, paced: int, reads: int,
            report: Report) -> Result:
    sample = texts(6 * burst + paced + WARM)
    ingest(client, [bench_event(i, sample[i]) for i in range(WARM)])  # Lance, indexes, the model
    report("warmed up with %d events", WARM)

    def events(phase: int) -> list[dict[str, Any]]:
        offset = WARM + phase * burst
        return [bench_event(offset + i, sample[offset + i]) for i in range(burst)]

    figures = {f"{k}_small" if k.startswith("search_cpu_ms") else k: v
               for k, v in _costs(client, pid, reads, report).items()}
    figures["facts_p50_ms_idle"], figures["search_p50_ms_idle"] = readers_alone(client, 3.0)
    alone_1, http_1 = ingest(client, events(0))
    report("alone: %.1f events/s applied, %.1f events/s acknowledged", alone_1, http_1)
    figures |= _open_loop(client, events(1), report)
    figures |= _open_loop(client, events(2), report, searches=False)
    figures |= _closed_loop(client, events(3), report)
    alone_2, http_2 = ingest(client, events(4))
    report("alone again: %.1f events/s", alone_2)
    alone = max(alone_1, alone_2)
    rate = alone / 2
    start = WARM + 6 * burst
    latencies = write_to_read(client, sample[start:start + paced], rate)
    p50, p99 = np.percentile(latencies, [50, 99])
    report("write -> read at %.1f events/s: p50 %.3f s, p99 %.3f s", rate, p50, p99)
    open_rate = figures.pop("_events_per_s_open_loop")
    facts_only = figures.pop("_events_per_s_open_loop_facts_only")
    closed_rate = figures.pop("_events_per_s_closed_loop")
    figures |= {
        "events_per_s_alone": alone, "events_per_s_alone_before": alone_1,
        "events_per_s_alone_after": alone_2, "http_events_per_s": max(http_1, http_2),
        "events_per_s_open_loop": open_rate, "ingest_ratio_open_loop": open_rate / alone,
        "ingest_ratio_open_loop_facts_only": facts_only / alone,
        "events_per_s_with_readers": closed_rate, "ratio_closed_loop": closed_rate / alone,
        "write_to_read_p50_s": float(p50), "write_to_read_p99_s": float(p99),
        "write_to_read_rate_events_per_s": rate, "events": float(burst),
        "loadavg_1m": os.getloadavg()[0],
    }
    return Result("service", figures, ratio=open_rate / alone)


def _costs(client: httpx.Client, pid: cost.Pids, reads: int,
           report: Report) -> dict[str, float]:
    facts = cost.facts_cost(client, pid, reads)
    report("facts: %.3f ms CPU per read (idle %.1f ms/s), p50 %.2f ms", facts.cpu_ms,
           facts.idle_ms_per_s, facts.p50_ms)
    searches, encoding = cost.search_cost(client, pid, max(50, reads // 10))
    report("search: %.2f ms CPU per read with encoding, %.2f ms the encoding, p50 %.1f ms",
           searches.cpu_ms, encoding, searches.p50_ms)
    return {"facts_cpu_ms": facts.cpu_ms, "facts_p50_ms_sequential": facts.p50_ms,
            "search_cpu_ms": max(0.0, searches.cpu_ms - encoding),
            "search_cpu_ms_with_encoding": searches.cpu_ms,
            "search_encoding_cpu_ms": encoding, "search_p50_ms_sequential": searches.p50_ms,
            "idle_cpu_ms_per_s": facts.idle_ms_per_s}


def _search_at_size(client: httpx.Client, pid: cost.Pids, size: int, posted: int, reads: int,
                    report: Report) -> dict[str, float]:
    """The store grown from ``posted`` to ``size`` records (events posted as the other phases
    post them), then the search's CPU per read: ``search_cpu_ms`` (the encoding subtracted)
    at ``size``."""
    started, n = time.perf_counter(), max(0, size - posted)
    grown = texts(n)
    for lo in range(0, n, 4096):
        ingest(client, [bench_event(posted + i, f"{grown[i]} (grown {i})") for i in
                        range(lo, min(n, lo + 4096))])
        report("grown by %d records (%.0f s)", min(n, lo + 4096), time.perf_counter() - started)
    searches, encoding = cost.search_cost(client, pid, max(50, reads // 10), tag="grown")
    report("search at %d records: %.2f ms CPU per read with encoding, %.2f ms the encoding, "
           "p50 %.1f ms", size, searches.cpu_ms, encoding, searches.p50_ms)
    return {"search_cpu_ms": max(0.0, searches.cpu_ms - encoding),
            "search_cpu_ms_with_encoding": searches.cpu_ms, "search_encoding_cpu_ms": encoding,
            "search_p50_ms_sequential": searches.p50_ms, "search_records": float(size)}


def _open_loop(client: httpx.Client, burst: list[dict[str, Any]], report: Report, *,
               searches: bool = True) -> dict[str, float]:
    """A burst under the offered load (without ``searches``: the facts reads alone, whose
    figures end in ``_facts_only``)."""
    facts = Stream(FACTS_RATE, lambda i: facts_of(client, i))
    streams = [facts]
    if searches:
        queries = cost.search_texts(100_000, "open")
        streams.append(Stream(SEARCH_RATE, lambda i: search(client, queries[i])))
    with OpenLoad(*streams):
        rate, _ = ingest(client, burst)
    errors = [e for s in streams for e in s.errors]
    report("open loop (%.0f facts/s%s offered): %.1f events/s; %d reads, %d errors",
           FACTS_RATE, f", {SEARCH_RATE:.0f} searches/s" if searches else "", rate,
           sum(len(s.latencies_ms) for s in streams), len(errors))
    if errors:
        raise AssertionError(f"open-loop reads failed: {errors[:3]}")
    f50, f99 = np.percentile(facts.latencies_ms, [50, 99])
    if not searches:
        return {"_events_per_s_open_loop_facts_only": rate,
                "facts_p50_ms_under_ingest_facts_only": float(f50),
                "facts_p99_ms_under_ingest_facts_only": float(f99)}
    return {"_events_per_s_open_loop": rate, "facts_p50_ms_under_ingest": float(f50),
            "facts_p99_ms_under_ingest": float(f99),
            "search_p50_ms_under_ingest": statistics.median(streams[1].latencies_ms),
            "reads_open_loop": float(sum(len(s.latencies_ms) for s in streams))}


def _closed_loop(client: httpx.Client, burst: list[dict[str, Any]],
                 report: Report) -> dict[str, float]:
    readers = Readers(client)
    threads = readers.run()
    try:
        rate, _ = ingest(client, burst)
    finally:
        readers.join(threads)
    report("closed loop (4 readers): %.1f events/s; %d facts, %d searches, %d errors", rate,
           len(readers.facts_ms), len(readers.search_ms), len(readers.errors))
    if readers.errors:
        raise AssertionError(f"readers failed: {readers.errors[:3]}")
    return {"_events_per_s_closed_loop": rate,
            "facts_p50_ms_closed_loop": statistics.median(readers.facts_ms),
            "search_p50_ms_closed_loop": statistics.median(readers.search_ms)}
