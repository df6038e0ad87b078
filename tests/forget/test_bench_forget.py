"""``memstack bench forget`` at a toy size: every phase measured, nothing lost, audits pass."""

from __future__ import annotations

from pathlib import Path

from memstack.jobs.bench.forget import INGEST_EVERY, measure_size
from memstack.jobs.measure import Report


def test_bench_measures_both_phases_while_ingest_goes_on(tmp_path: Path) -> None:
    figures = measure_size(3_000, 2, Report("test"), tmp_path, baseline=True, batch=5)
    # the audits' only misses are stale copies in DuckDB blocks (docs/forget.md, "Limit")
    assert figures["audit_residue_not_duckdb_file"] == 0.0 and figures["audit_pass_rate"] > 0
    assert figures["rows_lost"] == 0.0  # ingest kept committing; only the victims are gone
    assert figures["ingested_rows"] > 0
    assert 0 < figures["logical_p99_s"] <= figures["physical_p99_s"]
    assert figures["physical_p50_s"] <= figures["audited_p50_s"]
    assert figures["batch_100_s"] > 0 and figures["ingest_stall_max_s"] >= INGEST_EVERY * 0.5
    assert figures["lance_fragments_rewritten_p50"] == 1.0
    assert figures["baseline_s"] > 0
