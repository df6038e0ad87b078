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
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MEMSTACK_HOME": str(home)}
    if kafka is not None:
        env["MEMSTACK_BOOTSTRAP"] = kafka.bootstrap  # type: ignore[attr-defined]  # the fixture
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
    assert 0 < figures["sealed_over_unsealed"] < 5  # the cost of sealing, measured beside
    assert figures["sdk_unsealed_events_per_s"] > 0


def test_bench_ingest_quick_secure_measures_tls_beside_plaintext(tmp_path: Path) -> None:
    """``--secure`` starts its own two brokers (PLAINTEXT and SASL_SSL with SCRAM-SHA-512) and
    prints both rates and their ratio (~30 s here, most of it the two JVMs starting)."""
    body = _run(["bench", "ingest", "--quick", "--secure", "--json"], None, tmp_path, 300)
    assert body["name"] == "ingest"
    figures = body["figures"]
    assert isinstance(figures, dict) and figures["events_per_round"] == 2000
    assert figures["secure_events_per_s"] > 0 and figures["plaintext_events_per_s"] > 0
    assert figures["raw_secure_events_per_s"] > 0 and figures["raw_plaintext_events_per_s"] > 0
    assert 0 < figures["raw_secure_over_plaintext"] < 5
    assert body["ratio"] == pytest.approx(figures["secure_over_plaintext"], abs=1e-3)
    assert 0 < float(body["ratio"]) < 5  # type: ignore[arg-type]  # a number


def test_bench_secure_refused_by_a_measurement_that_does_not_take_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MEMSTACK_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "memstack.cli", "bench", "replay", "--quick",
                           "--secure", "--json"], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path, check=False)
    assert done.returncode != 0 and "--secure" in done.stderr, done.stderr[-2000:]


@pytest.mark.slow
def test_bench_pipeline_quick_prints_one_json_line(kafka: object, tmp_path: Path) -> None:
    """The live worker (Faust) writes a terminal escape on shutdown: it must not reach stdout."""
    body = _run(["bench", "pipeline", "--quick", "--json"], kafka, tmp_path, 900)
    figures = body["figures"]
    assert isinstance(figures, dict) and figures["burst_events"] == 600
    assert figures["forget_requests"] >= 1 and figures["freshness_p99_s"] > 0
