"""``memstack bench forget`` at a toy size: every figure measured, on the real stores, the real
projector and the real live forget path, while ingest goes on."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memstack.jobs.bench.forget import Plan, build, measure_size, result
from memstack.jobs.bench.forget.resolve import Sized, measure, subject_rows
from memstack.jobs.bench.forget.worker import (
    INGEST_EVERY,
    SUBJECT_ROWS,
    CorpusEncoder,
    subject_of,
)
from memstack.jobs.bench.query import TENANTS, Corpus
from memstack.jobs.measure import Report

FIGURES = ("logical_p50_s", "logical_p99_s", "physical_p50_s", "physical_p99_s",
           "audit_p50_s", "batch_100_s", "batch_done", "batch_extrapolated",
           "ingest_stall_max_s", "audit_pass_rate", "rows_lost", "ingested_rows")


def test_bench_measures_forgets_while_ingest_goes_on(tmp_path: Path) -> None:
    f = measure_size(Plan(3_000, 2, batch=4, batch_budget_s=300.0), Report("test"), tmp_path)
    assert set(FIGURES) <= f.keys(), f
    assert f["rows_lost"] == 0.0  # ingest kept committing; only the victims are gone
    assert f["ingested_rows"] > 0 and f["audit_pass_rate"] == 1.0
    assert 0 < f["logical_p50_s"] <= f["logical_p99_s"]
    assert 0 < f["physical_p50_s"] <= f["physical_p99_s"] <= f["audited_p99_s"]
    assert f["logical_p50_s"] < f["physical_p50_s"]  # hidden first, then erased
    assert f["batch_done"] == 4 and f["batch_extrapolated"] == 0.0
    # a batch may coalesce into fewer rewrites than its requests, so it can finish about as fast
    # as one request alone: only its being measured is certain
    assert f["batch_100_s"] > 0
    assert f["ingest_stall_max_s"] >= INGEST_EVERY * 0.5


def test_batch_over_budget_is_extrapolated_and_said_so(tmp_path: Path) -> None:
    f = measure_size(Plan(2_000, 1, batch=30, batch_budget_s=0.5), Report("test"), tmp_path)
    assert f["batch_extrapolated"] == 1.0 and f["batch_done"] < 30
    assert f["batch_100_s"] > 0.5 and f["rows_lost"] == 0.0


def test_result_figures() -> None:
    lo = {"physical_p50_s": 2.0, "batch_100_s": 200.0, "ingest_stall_max_s": 2.5}
    hi = {"physical_p50_s": 6.0, "batch_100_s": 600.0, "ingest_stall_max_s": 7.0}
    r = result(10, 100, lo, hi, Report("test")).figures
    assert r["rows_small"] == 10 and r["rows_large"] == 100 and r["growth"] == 3.0
    assert r["ingest_stall_max_s"] == 7.0 and r["batch_100_vs_one"] == 100.0
    assert r["physical_p50_s_small"] == 2.0 and r["physical_p50_s"] == 6.0
    assert "growth_3m" not in r  # --quick has two sizes
    huge = {"physical_p50_s": 9.0, "batch_100_s": 900.0, "ingest_stall_max_s": 9.5}
    r = result(10, 100, lo, hi, Report("test"), huge).figures
    assert r["growth_3m"] == 1.5 and r["physical_p50_s_3m"] == 9.0 and r["rows_3m"] == 3e6
    assert r["ingest_stall_max_s"] == 9.5 and r["growth"] == 3.0


def test_subject_rows_follow_the_generator() -> None:
    """The oracle of the resolution figures against a walk over the generated rows."""
    for rows in (1, 199, 200, 4_321):
        for row in (0, 7, 199, 200, 3_999, 4_320):
            if row >= rows:
                continue
            walked = [r for r in range(rows) if subject_of(r) == subject_of(row)
                      and r % TENANTS == row % TENANTS]
            assert subject_rows(row, rows) == walked
    assert len(subject_rows(5, 10_000)) == SUBJECT_ROWS


def test_resolution_is_measured_at_two_sizes_and_checked(tmp_path: Path) -> None:
    sizes = []
    for rows in (2_000, 6_000):
        corpus = Corpus(rows, np.random.default_rng(rows))
        directory = tmp_path / str(rows)
        build(directory, corpus, rows, CorpusEncoder(corpus, []), Report("test"))
        sizes.append(Sized(directory, rows))
    f = measure(sizes[0], sizes[1], True, Report("test"))
    assert f["resolve_exact_rate"] == 1.0  # every subject found whole, nothing else
    assert f["resolve_ms_small"] > 0 and f["resolve_ms_large"] > 0
    assert f["resolve_ms_ratio"] == f["resolve_ms_large"] / f["resolve_ms_small"]
