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
  last write's token returns (everything applied), with no reader; the median of the rounds'
  alone bursts; ``http_events_per_s``: until the broker acknowledged the last POST;
- open loop (:mod:`.open_loop`), in :data:`ROUNDS` rounds (``--quick``: 2), each a burst
  alone, a burst while 200 facts reads/s and 20 searches/s (new texts) are offered, and a
  burst with the facts reads alone: ``ingest_ratio_open_loop`` is the median over the rounds
  of (events/s with the load / events/s of the round's alone burst), with
  ``ingest_ratio_open_loop_min`` / ``_max``; ``facts_p50_ms_under_ingest``,
  ``facts_p99_ms_under_ingest``, ``search_p50_ms_under_ingest`` (latency from when each
  request was due, pooled over the rounds); the same with the facts reads alone:
  ``ingest_ratio_open_loop_facts_only``, ``facts_p50_ms_under_ingest_facts_only``,
  ``facts_p99_ms_under_ingest_facts_only``;
- ``client_cores_alone`` / ``_loaded`` / ``_facts_only``: the CPU this process (the posting
  writer and the readers' threads) used during those bursts ÷ their wall time, medians over
  the rounds: the share of the two cores the load generator takes from the service;
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
from collections.abc import Sequence
from dataclasses import dataclass, field
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
    facts_request,
    ingest,
    readers_alone,
    search_request,
    texts,
    write_to_read,
)
from memstack.jobs.bench.service.open_loop import Gets, OpenLoad, Stream
from memstack.jobs.measure import Report, Result

DEFAULT_READERS = 0
"""Reader processes of the main run (``MEMSTACK_BENCH_READERS`` overrides): the service's
default, so the headline is what a user gets without flags."""
FACTS_RATE = 200.0
SEARCH_RATE = 20.0
WARM = 96
ROUNDS = 3
"""Rounds of (alone, both loads, facts reads alone) bursts; the ratios are their medians."""


SEARCH_RECORDS = 100_000
"""``search_cpu_ms`` is measured once the store holds this many records (``--quick``: 10,000)."""


def run(quick: bool, report: Report) -> Result:
    burst, paced, reads = (256, 60, 500) if quick else (1024, 300, 3000)
    rounds = 2 if quick else ROUNDS
    readers = int(os.environ.get("MEMSTACK_BENCH_READERS", str(DEFAULT_READERS)))
    size = SEARCH_RECORDS // 10 if quick else SEARCH_RECORDS
    with scratch_deployment(Settings.from_env()) as settings:
        result = _measure(settings, readers, burst, paced, reads, size, rounds, report)
        result.figures |= scaling.read_scaling(settings, 3.0 if quick else 10.0, report)
        return result


def _measure(settings: Settings, readers: int, burst: int, paced: int, reads: int, size: int,
             rounds: int, report: Report) -> Result:
    extra = os.environ.get("MEMSTACK_BENCH_SERVE_ARGS", "").split()
    with scaling.served(settings, readers, "--after-timeout", "300", *extra) as (url, pids):
        report("service at %s (processes %s, %d reader(s))", url, pids(), readers)
        with httpx.Client(base_url=url, timeout=300.0,
                          headers={"Authorization": f"Bearer {KEY}"},
                          limits=httpx.Limits(max_connections=64)) as client:
            result = _phases(client, pids, burst, paced, reads, rounds, report)
            posted = WARM + (3 * rounds + 2) * burst + paced
            result.figures |= _search_at_size(client, pids, size, posted, reads, report)
    result.figures |= {"readers": float(readers), **scaling.publishing}
    return result


def _phases(client: httpx.Client, pid: cost.Pids, burst: int, paced: int, reads: int,
            rounds: int, report: Report) -> Result:
    sample = texts((3 * rounds + 2) * burst + paced + WARM)
    ingest(client, [bench_event(i, sample[i]) for i in range(WARM)])  # Lance, indexes, the model
    report("warmed up with %d events", WARM)
    phase = iter(range(3 * rounds + 2))

    def events() -> list[dict[str, Any]]:
        offset = WARM + next(phase) * burst
        return [bench_event(offset + i, sample[offset + i]) for i in range(burst)]

    figures = {f"{k}_small" if k.startswith("search_cpu_ms") else k: v
               for k, v in _costs(client, pid, reads, report).items()}
    figures["facts_p50_ms_idle"], figures["search_p50_ms_idle"] = readers_alone(client, 3.0)
    alone, loaded, facts_only, http = [], [], [], []
    both_facts, both_searches, only_facts = _Latencies(), _Latencies(), _Latencies()
    cores: dict[str, list[float]] = {"alone": [], "loaded": [], "facts_only": []}
    for n in range(rounds):  # each round: alone, then both loads, then the facts reads alone
        with _ClientCores(cores["alone"]):
            rate, acknowledged = ingest(client, events())
        alone.append(rate)
        http.append(acknowledged)
        with _ClientCores(cores["loaded"]):
            loaded.append(_open_loop(client, events(), report, both_facts, both_searches))
        with _ClientCores(cores["facts_only"]):
            facts_only.append(_open_loop(client, events(), report, only_facts))
        report("round %d: alone %.1f events/s, ratio %.3f (facts only %.3f)", n + 1, rate,
               loaded[-1] / rate, facts_only[-1] / rate)
    figures |= _closed_loop(client, events(), report)
    last, _ = ingest(client, events())
    report("alone again: %.1f events/s", last)
    rate = statistics.median([*alone, last]) / 2
    start = WARM + (3 * rounds + 2) * burst
    latencies = write_to_read(client, sample[start:start + paced], rate)
    p50, p99 = np.percentile(latencies, [50, 99])
    report("write -> read at %.1f events/s: p50 %.3f s, p99 %.3f s", rate, p50, p99)
    ratio = paired_ratio(alone, loaded)
    closed_rate = figures.pop("_events_per_s_closed_loop")
    figures |= {
        "events_per_s_alone": statistics.median(alone), "events_per_s_alone_last": last,
        "http_events_per_s": max(http), "events_per_s_open_loop": statistics.median(loaded),
        "ingest_ratio_open_loop": ratio.median, "ingest_ratio_open_loop_min": ratio.low,
        "ingest_ratio_open_loop_max": ratio.high,
        "ingest_ratio_open_loop_facts_only": paired_ratio(alone, facts_only).median,
        "rounds": float(rounds),
        **{f"client_cores_{k}": statistics.median(v) for k, v in cores.items()},
        "facts_p50_ms_under_ingest": both_facts.at(50),
        "facts_p99_ms_under_ingest": both_facts.at(99),
        "search_p50_ms_under_ingest": both_searches.at(50),
        "reads_open_loop": float(len(both_facts.ms) + len(both_searches.ms)),
        "facts_p50_ms_under_ingest_facts_only": only_facts.at(50),
        "facts_p99_ms_under_ingest_facts_only": only_facts.at(99),
        "events_per_s_with_readers": closed_rate,
        "ratio_closed_loop": closed_rate / statistics.median(alone),
        "write_to_read_p50_s": float(p50), "write_to_read_p99_s": float(p99),
        "write_to_read_rate_events_per_s": rate, "events": float(burst),
        "loadavg_1m": os.getloadavg()[0],
    }
    return Result("service", figures, ratio=ratio.median)


@dataclass(frozen=True)
class Paired:
    median: float
    low: float
    high: float


def paired_ratio(alone: Sequence[float], loaded: Sequence[float]) -> Paired:
    """The median, least and greatest of each round's loaded rate over that round's alone
    rate. Pairing a burst with the one just before it keeps the store's growth and the
    machine's drift out of the ratio; the median keeps one slow burst from deciding it (the
    ratio of one loaded burst to the faster of two alone ones, as measured before, was low
    by the spread of the alone bursts)."""
    if not alone or len(alone) != len(loaded):
        raise ValueError(f"{len(alone)} alone and {len(loaded)} loaded bursts: pair each")
    ratios = [b / a for a, b in zip(alone, loaded, strict=True)]
    return Paired(statistics.median(ratios), min(ratios), max(ratios))


class _ClientCores:
    """This process's CPU over a phase ÷ its wall time, appended to ``into``: the cores the
    load generator (the posting writer and the readers' threads) takes from the two the
    service shares with it."""

    def __init__(self, into: list[float]) -> None:
        self.into = into

    def __enter__(self) -> None:
        self.cpu, self.wall = time.process_time(), time.perf_counter()

    def __exit__(self, *_: object) -> None:
        self.into.append((time.process_time() - self.cpu) / (time.perf_counter() - self.wall))


@dataclass
class _Latencies:
    """Latencies (ms) of one kind of read, pooled over the rounds."""

    ms: list[float] = field(default_factory=list)

    def at(self, percentile: float) -> float:
        return float(np.percentile(self.ms, percentile))


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


def _open_loop(client: httpx.Client, burst: list[dict[str, Any]], report: Report,
               facts_ms: _Latencies, searches_ms: _Latencies | None = None) -> float:
    """A burst ingested under the offered load (facts reads, and searches when
    ``searches_ms`` is given): its events/s; the reads' latencies join the lists."""
    gets = Gets(client.base_url, {"Authorization": f"Bearer {KEY}"})
    facts = Stream(FACTS_RATE, lambda i: gets.get(*facts_request(i)))
    streams = [facts]
    if searches_ms is not None:
        queries = cost.search_texts(100_000, f"open{len(searches_ms.ms)}")
        streams.append(Stream(SEARCH_RATE, lambda i: gets.get(*search_request(queries[i]))))
    with OpenLoad(*streams):
        rate, _ = ingest(client, burst)
    errors = [e for s in streams for e in s.errors]
    report("open loop (%.0f facts/s%s offered): %.1f events/s; %d reads, %d errors",
           FACTS_RATE, "" if searches_ms is None else f", {SEARCH_RATE:.0f} searches/s", rate,
           sum(len(s.latencies_ms) for s in streams), len(errors))
    if errors:
        raise AssertionError(f"open-loop reads failed: {errors[:3]}")
    facts_ms.ms += facts.latencies_ms
    if searches_ms is not None:
        searches_ms.ms += streams[1].latencies_ms
    return rate


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
