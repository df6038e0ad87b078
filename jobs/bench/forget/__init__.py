"""``memstack bench forget``: how long forgetting takes as the stores grow, while ingest goes on.

Per size (``--quick``: 20k and 200k memories; full: 100k, 1M and 3M) the stores are generated in
bulk with the query benchmark's corpus and indexed as the worker indexes them; then a store
thread runs the live worker's schedule over them (:mod:`memstack.jobs.bench.forget.worker`:
a batch of events committed by the real projector every 0.2 s, and between two batches the
forget records waiting, taken together as the worker's forget agent takes them: hidden and
purged by the real ``LiveForgetting`` on the store thread, audited by the real ``Auditor`` in
its own thread, the worker's default; or purged and audited by the real ``Eraser`` with
``LiveConfig.background_erase``). Against it:

1. :data:`SINGLES` event-scope requests, one at a time (each waits until audited);
2. :data:`BATCH` event-scope requests submitted together; when they are not all erased within
   :data:`BATCH_BUDGET_S`, ``batch_100_s`` is the measured time per request times :data:`BATCH`
   (``batch_done`` says how many were measured, ``batch_extrapolated`` 1).

Figures at the large size (``*_small`` at the small one, ``*_3m`` at 3M in a full run),
seconds from the request's record being handed to the worker ("logged"):

- ``logical_*``: until reads answer without the content: logged -> hidden (the logical phase
  committed; a read may still wait at the service's gate while a purge runs, see
  docs/forget.md). ``audited_*``: logged -> audited.
- ``physical_*``: until every store's bytes are erased (the physical pass: probe, purge of every
  store; the audit after it not);
- ``growth``: physical p50 large / small (``growth_3m``: 3M / large); ``batch_100_s``: first
  logged -> last erased;
- ``ingest_stall_max_s``: the longest gap between two live commits while requests ran (the
  nominal gap is 0.2 s).
- ``resolve_ms_small``/``resolve_ms_large``/``resolve_ms_ratio``: resolving a subject forget
  (20 events of its tenant at both sizes) over the stores of each size after their run, with a
  lineage of every row (:mod:`memstack.jobs.bench.forget.resolve`); ``resolve_exact_rate``: the
  resolutions that found exactly the generator's rows.

Nothing here is faster than the worker: the model (texts map to the corpus's vectors), Kafka,
the log lineage and key destruction are left out, so the figures are lower bounds for the
deployed worker.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memstack.jobs.bench.forget import resolve as forget_resolve
from memstack.jobs.bench.forget.resolve import Sized
from memstack.jobs.bench.forget.worker import (
    Applied,
    CorpusEncoder,
    StoreThread,
    forget_record,
    write,
)
from memstack.jobs.bench.query import Corpus
from memstack.jobs.measure import Report, Result
from memstack.pipelines.embedding import record_encoder
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.lance_policy import IndexPolicy

log = logging.getLogger(__name__)

SINGLES, QUICK_SINGLES = 20, 6
BATCH = 100
BATCH_BUDGET_S, QUICK_BATCH_BUDGET_S = 600.0, 150.0
EXTRA_ROWS = 200_000
"""Rows held back for the live ingest during the run (at 250 rows/s: 13 minutes)."""
WRITE_CHUNK = IndexPolicy().fragment_rows // 2
"""Rows per bulk write, one Lance fragment each: the size the worker's maintenance compacts
its small fragments into (``IndexPolicy.fragment_rows`` // 2)."""


@dataclass(frozen=True)
class Plan:
    rows: int
    singles: int
    batch: int = BATCH
    batch_budget_s: float = BATCH_BUDGET_S


def build(directory: Path, corpus: Corpus, rows: int, encoder: CorpusEncoder,
          report: Report) -> None:
    with Stores.open(directory) as stores:
        record_encoder(directory, encoder)  # the stores say which vectors they hold
        began = time.monotonic()
        for lo in range(0, rows, WRITE_CHUNK):
            write(stores, corpus, lo, min(rows, lo + WRITE_CHUNK))
        report("%d rows written in %.1f s", rows, time.monotonic() - began)
        began = time.monotonic()
        stores.vectors.maintain(force=True)
        report("indexes built in %.1f s", time.monotonic() - began)


def stores_dir(tmp: Path, rows: int) -> Path:
    return tmp / f"stores-{rows}" / "live"


def measure_size(plan: Plan, report: Report, tmp: Path) -> dict[str, float]:
    rng = np.random.default_rng(11)
    extra = min(EXTRA_ROWS, max(10_000, plan.rows))
    corpus = Corpus(plan.rows + extra, rng)
    victims = [int(v) for v in rng.choice(plan.rows, size=plan.singles + plan.batch,
                                          replace=False)]
    directory = stores_dir(tmp, plan.rows)
    encoder = CorpusEncoder(corpus, victims + list(range(plan.rows, plan.rows + extra)))
    build(directory, corpus, plan.rows, encoder, report)
    worker = StoreThread(directory, corpus, plan.rows, encoder)
    thread = threading.Thread(target=worker.loop, name="bench-store-thread", daemon=True)
    thread.start()
    try:
        figures = _requests(worker, corpus, victims, plan, report)
    finally:
        worker.stop.set()
        thread.join()
    with Stores.open(directory, read_only=True) as stores:
        kept = worker.next_row - len(worker.logged)  # every request hidden, erased or not
        figures["rows_lost"] = float(2 * kept - stores.vectors.count()
                                     - stores.events.counts()["records"])
    figures["ingested_rows"] = float(worker.next_row - plan.rows)
    return figures


def _requests(worker: StoreThread, corpus: Corpus, victims: list[int], plan: Plan,
              report: Report) -> dict[str, float]:
    first_commit = len(worker.commits)
    singles: list[Applied] = []
    for i, row in enumerate(victims[:plan.singles]):
        record, request = forget_record(row, corpus, i)
        worker.inbox.put((record, time.monotonic()))
        worker.wait([request])
        singles.append(a := worker.applied[request.request_id])
        report("request %d/%d: invisible %.3f s, erased %.2f s, audited %.2f s, audit %s",
               i + 1, plan.singles, a.invisible - a.logged, a.erased - a.logged,
               a.audited - a.logged, "pass" if a.outcome.audit.passed else "FAIL")
    batch = [forget_record(row, corpus, plan.singles + i)
             for i, row in enumerate(victims[plan.singles:])]
    logged = time.monotonic()
    for record, _ in batch:
        worker.inbox.put((record, logged))
    complete = worker.wait([r for _, r in batch], plan.batch_budget_s)
    while not worker.inbox.empty():  # the budget is spent: the rest is left unapplied
        worker.inbox.get_nowait()
    time.sleep(0.5)
    done = [worker.applied[r.request_id] for _, r in batch if r.request_id in worker.applied]
    last = max((a.erased for a in done), default=time.monotonic()) - logged
    batch_s = last if complete else last * plan.batch / max(1, len(done))
    gaps = np.diff(np.asarray(worker.commits[first_commit:]))
    report("batch of %d: %d applied in %.1f s (%s); longest gap between commits %.2f s",
           plan.batch, len(done), last, "all" if complete else "budget spent",
           float(gaps.max()) if len(gaps) else 0.0)
    return _figures(singles, done, batch_s, complete, gaps)


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else 0.0


def _figures(singles: list[Applied], batch: list[Applied], batch_s: float, complete: bool,
             gaps: npt.NDArray[np.float64]) -> dict[str, float]:
    physical = [a.erased - a.logged for a in singles]
    logical = [a.invisible - a.logged for a in singles]
    audited = [a.audited - a.logged for a in singles]
    stores = {f"{r.store}_s": r.physical.get("s", 0.0)
              for a in singles[-1:] for r in a.outcome.reports}
    return {
        "logical_p50_s": _pct(logical, 50), "logical_p99_s": _pct(logical, 99),
        "audited_p50_s": _pct(audited, 50), "audited_p99_s": _pct(audited, 99),
        "physical_p50_s": _pct(physical, 50), "physical_p99_s": _pct(physical, 99),
        "audit_p50_s": _pct([a.outcome.seconds["audit"] for a in singles], 50),
        "batch_100_s": batch_s, "batch_done": float(len(batch)),
        "batch_extrapolated": float(not complete),
        "ingest_stall_max_s": float(gaps.max()) if len(gaps) else 0.0,
        "audit_pass_rate": float(np.mean([a.outcome.audit.passed for a in singles + batch])),
        **{f"last_single_{k}": v for k, v in stores.items()},
    }


HUGE = 3_000_000
"""The third size of a full run (``*_3m`` figures, ``growth_3m``): a bounded purge costs the
same at 3M as at 1M."""


def run(quick: bool, report: Report) -> Result:
    small, large = (20_000, 200_000) if quick else (100_000, 1_000_000)
    singles = QUICK_SINGLES if quick else SINGLES
    budget = QUICK_BATCH_BUDGET_S if quick else BATCH_BUDGET_S
    root = Path("out").resolve() if Path("out").is_dir() else None
    huge = None
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        lo = measure_size(Plan(small, singles, batch_budget_s=budget), report, Path(tmp))
        hi = measure_size(Plan(large, singles, batch_budget_s=budget), report, Path(tmp))
        resolving = forget_resolve.measure(
            Sized(stores_dir(Path(tmp), small), small + int(lo["ingested_rows"])),
            Sized(stores_dir(Path(tmp), large), large + int(hi["ingested_rows"])), quick, report)
        if not quick:
            for size in (small, large):  # the disk the third size needs
                shutil.rmtree(stores_dir(Path(tmp), size).parent, ignore_errors=True)
            huge = measure_size(Plan(HUGE, singles, batch_budget_s=budget), report, Path(tmp))
    out = result(small, large, lo, hi, report, huge)
    out.figures |= resolving
    return out


def result(small: int, large: int, lo: dict[str, float], hi: dict[str, float],
           report: Report, huge: dict[str, float] | None = None) -> Result:
    figures = {"rows_small": float(small), "rows_large": float(large)}
    figures |= {k: v for k, v in hi.items()}
    figures |= {f"{k}_small": v for k, v in lo.items()}
    figures["growth"] = hi["physical_p50_s"] / lo["physical_p50_s"]
    figures["batch_100_vs_one"] = hi["batch_100_s"] / hi["physical_p50_s"]
    stalls = [lo["ingest_stall_max_s"], hi["ingest_stall_max_s"]]
    if huge is not None:
        figures["rows_3m"] = float(HUGE)
        figures |= {f"{k}_3m": v for k, v in huge.items()}
        figures["growth_3m"] = huge["physical_p50_s"] / hi["physical_p50_s"]
        stalls.append(huge["ingest_stall_max_s"])
    figures["ingest_stall_max_s"] = max(stalls)
    report("figures: %s", figures)
    return Result("bench forget", figures)
