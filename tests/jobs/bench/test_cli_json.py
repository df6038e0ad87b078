"""Real ``memstack bench ... --json`` runs: stdout is exactly one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _run(args: list[str], kafka: object, home: Path, timeout_s: float) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MEMSTACK_HOME": str(home),
           "MEMSTACK_BOOTSTRAP": kafka.bootstrap}  # type: ignore[attr-defined]  # the fixture
    done = subprocess.run([sys.executable, "-m", "memstack.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout_s, cwd=home, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout[:500]
    body: dict[str, object] = json.loads(lines[0])
    return body


def test_bench_ingest_quick_prints_one_json_line(kafka: object, tmp_path: Path) -> None:
    body = _run(["bench", "ingest", "--quick", "--json"], kafka, tmp_path, 300)
    assert body["name"] == "ingest"
    figures = body["figures"]
    assert isinstance(figures, dict) and figures["events_per_round"] == 5000
    assert 0 < float(body["ratio"]) < 5  # type: ignore[arg-type]  # a number


@pytest.mark.slow
def test_bench_pipeline_quick_prints_one_json_line(kafka: object, tmp_path: Path) -> None:
    """The live worker (Faust) writes a terminal escape on shutdown: it must not reach stdout."""
    body = _run(["bench", "pipeline", "--quick", "--json"], kafka, tmp_path, 900)
    figures = body["figures"]
    assert isinstance(figures, dict) and figures["burst_events"] == 600
    assert figures["forget_requests"] >= 1 and figures["freshness_p99_s"] > 0
