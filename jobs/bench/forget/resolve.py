"""``memstack bench forget``'s resolution figures: a subject forget resolved over two store sizes.

A subject forget's targets come from the log's lineage (an index of every envelope) and from
the stores (DuckDB records and fact entries, the Lance rows by subject and their texts). The
stores are the ones the benchmark built and ran its forgets on, so they hold the rows ingested
meanwhile; the lineage holds an envelope for each of those rows, as the events topic would.
Requests alternate between the two sizes (A/B, one process, one warm-up each) so that the
machine's drift falls on both. Each resolution is checked against the generator: a subject
covers :data:`SUBJECT_ROWS` rows of its tenant at every size, so the work a subject forget
needs is the same at both sizes and only the store's size differs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from memstack.jobs.bench.forget.worker import SUBJECT_ROWS, event_id, subject_of
from memstack.jobs.bench.query import TENANTS
from memstack.jobs.measure import Report
from memstack.operators.forget import ForgetRequest, Subject
from memstack.operators.log import LogPosition
from memstack.pipelines.forgetting.lineage import LogEntry, StaticLineage
from memstack.pipelines.forgetting.resolve import resolve
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.lance_index import LanceVectorIndex
from memstack.schemas.events import ForgetScope

ROUNDS, QUICK_ROUNDS = 40, 15
LOGGED = datetime(2026, 1, 1, tzinfo=UTC)
"""When the generated envelopes were logged (before every request)."""


@dataclass(frozen=True)
class Sized:
    """The stores of one size and how many rows of the generator they were given."""

    directory: Path
    rows: int


def envelopes(rows: int) -> Iterator[LogEntry]:
    """The log's envelope of each generated row, as the events topic holds it."""
    for row in range(rows):
        subject = Subject(event_id(row), f"t{row % TENANTS}", f"s{row % 1000}", subject_of(row))
        yield LogEntry(subject, LogPosition(LOGGED + timedelta(microseconds=row), 0, row),
                       "plain")


def subject_rows(row: int, rows: int) -> list[int]:
    """The rows that share ``row``'s subject and tenant (the generator's rule, not the index)."""
    first = (row // (SUBJECT_ROWS * TENANTS)) * SUBJECT_ROWS * TENANTS
    return [r for r in range(first + row % TENANTS, min(rows, first + SUBJECT_ROWS * TENANTS),
                             TENANTS)]


def request_for(row: int, n: int) -> ForgetRequest:
    scope = ForgetScope(type="subject", subject=subject_of(row))
    return ForgetRequest(f"resolve-{n}", f"t{row % TENANTS}", scope,
                         LogPosition(datetime.now(UTC), 0, n))


def _indexes(stores: Stores) -> tuple[DuckDBEventIndex, LanceVectorIndex]:
    events, vectors = stores.events, stores.vectors
    assert isinstance(events, DuckDBEventIndex)  # what Stores.open opens
    assert isinstance(vectors, LanceVectorIndex)
    return events, vectors


def measure(small: Sized, large: Sized, quick: bool, report: Report) -> dict[str, float]:
    """``resolve_ms_small``/``_large`` (p50 ms), their ratio, and ``resolve_exact_rate``."""
    rounds = QUICK_ROUNDS if quick else ROUNDS
    rng = np.random.default_rng(29)
    sizes = (small, large)
    lineages = [StaticLineage.of_entries(envelopes(s.rows)) for s in sizes]
    times: list[list[float]] = [[], []]
    exact = 0
    with Stores.open(small.directory, read_only=True) as a, \
            Stores.open(large.directory, read_only=True) as b:
        for n in range(rounds + 1):
            for i, stores in enumerate((a, b)):
                row = int(rng.integers(small.rows))  # a subject both sizes hold
                began = time.perf_counter()
                found = resolve(request_for(row, n), *_indexes(stores), lineages[i])
                took = time.perf_counter() - began
                if n == 0:
                    continue  # warm-up
                times[i].append(took * 1000)
                want = {event_id(r) for r in subject_rows(row, sizes[i].rows)}
                exact += found.targets.event_ids == want
    lo, hi = (float(np.percentile(t, 50)) for t in times)
    report("resolve a subject forget: p50 %.1f ms at %d rows, %.1f ms at %d rows",
           lo, small.rows, hi, large.rows)
    return {"resolve_ms_small": lo, "resolve_ms_large": hi, "resolve_ms_ratio": hi / lo,
            "resolve_exact_rate": exact / (2 * rounds)}
