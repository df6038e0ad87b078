"""``memstack bench forget``: how long forgetting takes as the stores grow, while ingest goes on.

Per size (``--quick``: 20k and 200k memories; full: 100k and 1M), the stores are generated with
the query benchmark's corpus (synthetic clustered vectors and Zipf texts, one DuckDB record and
one LanceDB memory row per event) through the stores' normal write path, indexes built as the
worker builds them. Then a **store thread** runs as the live worker's does: every
:data:`INGEST_EVERY` s it commits a batch of :data:`INGEST_ROWS` new events to both stores, and
between batches it hides the forget requests that arrived (:meth:`ForgetProcessor.hide`, the
logical phase); a :class:`BackgroundEraser` erases and audits them (the physical phase).

1. :data:`SINGLES` event-scope requests one at a time (each waits for its audit);
2. :data:`BATCH` event-scope requests submitted together.

Figures: ``logical_*`` = request logged -> hidden (no read returns it), ``physical_*`` = logged
-> erased (no byte left), at the large size; ``growth`` = physical p50 large / small;
``batch_100_s`` = the batch logged -> all erased; ``ingest_stall_max_s`` = the longest gap
between two ingest commits while requests were processed (the nominal gap is
:data:`INGEST_EVERY`). The ratio compares against the previous design, measured side by side at
the small size: one request erased by rewriting the whole Lance table with every index rebuilt
and copying the whole DuckDB file (``baseline_s``).

The store thread stands in for the Faust worker (no Kafka, no encoder: the vectors are
precomputed), so the figures isolate the stores; the live worker runs the same calls.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from queue import Empty, SimpleQueue

import numpy as np
import numpy.typing as npt

from memstack.jobs.bench.forget_baseline import full_rewrite_forget
from memstack.jobs.bench.query import Corpus
from memstack.jobs.measure import Report, Result
from memstack.operators.forget import ForgetRequest
from memstack.operators.log import LogPosition
from memstack.operators.mutations import MemoryRow, PutRecord, RecordRow
from memstack.pipelines.forgetting import (
    AuditProbe,
    AuditReport,
    ForgetProcessor,
    ForgetStores,
)
from memstack.pipelines.forgetting.eraser import BackgroundEraser
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import ForgetScope

log = logging.getLogger(__name__)

INGEST_ROWS = 50
INGEST_EVERY = 0.2
"""50 events per 0.2 s: the live worker's pace on this machine (~250 events/s, encoder-bound)."""
HIDE_BUDGET_S = 0.2
"""The store thread hides queued requests for at most this long between two batches."""
SINGLES, QUICK_SINGLES = 20, 10
BATCH = 100
EXTRA_ROWS = 40_000
"""Rows held back for the live ingest during the run."""
AUDITED_IN_BATCH = 10
"""Audits of the batch's requests (each reads every file: seconds at 1M rows); the others are
skipped and left out of ``audit_pass_rate``. Every single request is audited."""


class BenchProcessor(ForgetProcessor):
    """The real processor, with the audits of some requests skipped (:attr:`unaudited`)."""

    unaudited: frozenset[str] = frozenset()

    def audit(self, probe: AuditProbe) -> AuditReport:
        if probe.request.request_id in self.unaudited:
            return AuditReport(probe.request.request_id, probe.request.describe(), (), (),
                               {"audit_skipped": 1})
        return super().audit(probe)


ID_MS = 1_767_225_600_000
"""The millisecond part of the benchmark's event ids (UUIDv7, 2026-01-01)."""


def event_id(row: int) -> str:
    """Row ``row``'s event id: a canonical UUIDv7 (fixed time, the row number as its tail)."""
    return str(uuid.UUID(int=(ID_MS << 80) | (7 << 76) | (2 << 62) | row))


def record_of(row: MemoryRow) -> RecordRow:
    return RecordRow(row.event_id, row.tenant, "bench", row.session, row.subject, row.kind,
                     row.vt_from, row.vt_from, None, row.tt_from, row.partition, row.offset,
                     json.dumps({"text": row.text}), row.text, "bench", "agent")


def write(stores: Stores, corpus: Corpus, lo: int, hi: int, rng: np.random.Generator, *,
          maintain: bool) -> None:
    rows = [replace(r, memory_id=event_id(i), event_id=event_id(i))
            for i, r in zip(range(lo, hi), corpus.rows(lo, hi, rng), strict=True)]
    stores.events.apply([PutRecord(record_of(r)) for r in rows], {}, topic="bench")
    stores.vectors.merge(rows, corpus.vectors[lo:hi], maintain=maintain)


@dataclass
class StoreThread:
    """The live worker's store thread: ingest batches, and hides between them."""

    stores: Stores
    corpus: Corpus
    eraser: BackgroundEraser
    next_row: int
    rng: np.random.Generator
    inbox: SimpleQueue[ForgetRequest] = field(default_factory=SimpleQueue)
    commits: list[float] = field(default_factory=list)
    hidden_at: dict[str, datetime] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    failure: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                began = time.monotonic()
                hi = min(self.next_row + INGEST_ROWS, len(self.corpus.cluster))
                if hi > self.next_row:
                    write(self.stores, self.corpus, self.next_row, hi, self.rng, maintain=True)
                    self.next_row = hi
                self.commits.append(time.monotonic())
                self._hide_some(began + INGEST_EVERY)
                self.stop.wait(max(0.0, began + INGEST_EVERY - time.monotonic()))
        except BaseException as exc:
            self.failure = exc

    def _hide_some(self, until: float) -> None:
        deadline = min(until, time.monotonic() + HIDE_BUDGET_S)
        while time.monotonic() < deadline:
            try:
                request = self.inbox.get_nowait()
            except Empty:
                return
            hidden = self.eraser.processor.hide(request)
            self.hidden_at[request.request_id] = datetime.now(UTC)
            self.eraser.submit(hidden)


def request_for(row: int, corpus: Corpus) -> ForgetRequest:
    scope = ForgetScope(type="event", event_id=event_id(row))
    now = datetime.now(UTC)
    return ForgetRequest(str(uuid.uuid4()), f"t{corpus.tenant[row]}", scope,
                         LogPosition(now, 0, 0))


@dataclass
class Timings:
    logical: list[float] = field(default_factory=list)
    physical: list[float] = field(default_factory=list)
    audited: list[float] = field(default_factory=list)
    passed: list[bool] = field(default_factory=list)
    other_residue: int = 0
    """Failed audits with a residual other than DuckDB's stale copies (``file_bytes``)."""
    purge: list[dict[str, float]] = field(default_factory=list)


def _collect(loop: StoreThread, requests: list[ForgetRequest], timings: Timings) -> float:
    """Record each request's phases; the time from the first logged to the last erased."""
    by_id = {o.request.request_id: o for o in loop.eraser.outcomes}
    last = 0.0
    for r in requests:
        o = by_id[r.request_id]
        assert o.status is not None
        seconds = o.status.seconds()
        timings.logical.append((loop.hidden_at[r.request_id] - r.log_time).total_seconds())
        timings.physical.append(seconds["erased"])
        timings.audited.append(seconds["audited"])
        timings.purge.append({f"{rep.store}.{k}": v for rep in o.reports
                              for k, v in rep.physical.items()})
        last = max(last, (o.status.reached["erased"] - requests[0].log_time).total_seconds())
        if not o.audit.notes.get("audit_skipped"):
            timings.passed.append(o.audit.passed)
            if not o.audit.passed:
                log.warning("audit of %s failed: %s", r.request_id, o.audit.table())
                timings.other_residue += any(x.count and (x.store, x.check) != (
                    "duckdb", "file_bytes") for x in o.audit.residuals)
    return last


def _wait(loop: StoreThread, requests: list[ForgetRequest]) -> None:
    """Until every request of ``requests`` is erased and audited."""
    wanted = {r.request_id for r in requests}
    while not wanted <= {o.request.request_id for o in loop.eraser.outcomes}:
        if loop.failure is not None or loop.eraser.failure is not None:
            raise RuntimeError("the store thread or the eraser failed") from (
                loop.failure or loop.eraser.failure)
        time.sleep(0.01)


def measure_size(rows: int, singles: int, report: Report, tmp: Path, baseline: bool,
                 batch: int = BATCH) -> dict[str, float]:
    rng = np.random.default_rng(11)
    corpus = Corpus(rows + EXTRA_ROWS, rng)
    directory = tmp / f"stores-{rows}"
    with Stores.open(directory) as stores:
        began = time.monotonic()
        for lo in range(0, rows, 50_000):
            write(stores, corpus, lo, min(rows, lo + 50_000), rng, maintain=False)
        report("%d rows written in %.1f s", rows, time.monotonic() - began)
        began = time.monotonic()
        stores.vectors.maintain(force=True)
        report("indexes built in %.1f s", time.monotonic() - began)
        processor = BenchProcessor(ForgetStores.over(stores), outcomes_dir=tmp / "forget")
        eraser = BackgroundEraser(processor)
        loop = StoreThread(stores, corpus, eraser, rows, rng)
        thread = threading.Thread(target=loop.run, name="bench-store-thread", daemon=True)
        thread.start()
        victims = [int(v) for v in rng.choice(rows, size=singles + batch, replace=False)]
        try:
            figures = _run_requests(loop, corpus, victims, singles, report)
        finally:
            loop.stop.set()
            thread.join()
            eraser.close()
        ingested = loop.next_row - rows
        kept = rows + ingested - len(victims)
        figures["rows_lost"] = float(2 * kept - stores.vectors.count()
                                     - stores.events.counts()["records"])
    figures["ingested_rows"] = float(ingested)
    if baseline:
        figures["baseline_s"] = full_rewrite_forget(directory, event_id(victims[0]), report)
    return figures


def _run_requests(loop: StoreThread, corpus: Corpus, victims: list[int], singles: int,
                  report: Report) -> dict[str, float]:
    one = Timings()
    first_commit = len(loop.commits)
    for i, row in enumerate(victims[:singles]):
        request = request_for(row, corpus)
        loop.inbox.put(request)
        _wait(loop, [request])
        _collect(loop, [request], one)
        report("request %d/%d: logical %.3f s, physical %.2f s, audited %.2f s, audit %s",
               i + 1, singles, one.logical[-1], one.physical[-1], one.audited[-1],
               "pass" if one.passed[-1] else "FAIL")
    batch = [request_for(row, corpus) for row in victims[singles:]]
    assert isinstance(loop.eraser.processor, BenchProcessor)
    loop.eraser.processor.unaudited = frozenset(r.request_id for r in batch[AUDITED_IN_BATCH:])
    for request in batch:
        loop.inbox.put(request)
    _wait(loop, batch)
    many = Timings()
    batch_s = _collect(loop, batch, many)
    gaps = np.diff(np.asarray(loop.commits[first_commit:]))
    report("batch of %d: all erased after %.2f s; longest gap between commits %.2f s",
           len(batch), batch_s, float(gaps.max()) if len(gaps) else 0.0)
    return _figures(one, many, batch_s, gaps)


def _figures(one: Timings, many: Timings, batch_s: float,
             gaps: npt.NDArray[np.float64]) -> dict[str, float]:
    def pct(xs: list[float], q: float) -> float:
        return float(np.percentile(np.asarray(xs), q))

    purge = {k: pct([p[k] for p in one.purge if k in p], 50) for k in one.purge[0]}
    return {
        "logical_p50_s": pct(one.logical + many.logical, 50),
        "logical_p99_s": pct(one.logical + many.logical, 99),
        "physical_p50_s": pct(one.physical, 50), "physical_p99_s": pct(one.physical, 99),
        "audited_p50_s": pct(one.audited, 50),
        "batch_100_s": batch_s,
        "ingest_stall_max_s": float(gaps.max()) if len(gaps) else 0.0,
        "audit_pass_rate": float(np.mean(one.passed + many.passed)),
        "audit_residue_not_duckdb_file": float(one.other_residue + many.other_residue),
        "lance_fragments_rewritten_p50": purge.get("lancedb.fragments_rewritten", 0.0),
        "lance_rewrite_p50_s": purge.get("lancedb.rewrite_s", 0.0),
        "duckdb_purge_p50_s": purge.get("duckdb.purge_s", 0.0),
        "duckdb_tables_rebuilt": float(sum(p.get("duckdb.tables_rebuilt", 0.0)
                                           for p in one.purge + many.purge)),
    }


def run(quick: bool, report: Report) -> Result:
    small, large = (20_000, 200_000) if quick else (100_000, 1_000_000)
    singles = QUICK_SINGLES if quick else SINGLES
    with tempfile.TemporaryDirectory(dir=Path("out").resolve() if Path("out").is_dir()
                                     else None) as tmp:
        lo = measure_size(small, singles, report, Path(tmp), baseline=True)
        hi = measure_size(large, singles, report, Path(tmp), baseline=False)
    figures = {"rows_small": float(small), "rows_large": float(large)}
    figures |= {f"{k}_small": v for k, v in lo.items()}
    figures |= {k: v for k, v in hi.items()}
    figures["growth"] = hi["physical_p50_s"] / lo["physical_p50_s"]
    figures["batch_100_vs_one"] = hi["batch_100_s"] / hi["physical_p50_s"]
    figures["ingest_stall_max_s"] = max(lo["ingest_stall_max_s"], hi["ingest_stall_max_s"])
    figures["baseline_s"] = lo["baseline_s"]
    report("figures: %s", figures)
    return Result("bench forget", figures, ratio=figures["baseline_s"] / lo["physical_p50_s"])

