"""``memstack eval faults --quick``: one round of each nemesis against a real deployment (its
own broker, a tmpfs for the stores, ``memstack serve``, PyFlink, Ray), the checker after it,
and a fuzz run of 1,000 hostile inputs. Every correctness figure must meet its goal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]


def test_quick_fault_suite_meets_every_goal() -> None:
    seed = os.environ.get("MEMSTACK_FAULTS_SEED", "")
    argv = [sys.executable, "-m", "memstack.cli", "eval", "faults", "--quick", "--json",
            *(["--seed", seed] if seed else [])]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1700,
                          check=False)
    assert done.returncode == 0, done.stderr[-5000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout[-2000:]  # exactly one JSON line on stdout
    figures = json.loads(lines[0])["figures"]
    problems = f"{json.dumps(figures)}\n{done.stderr[-6000:]}"
    assert figures["rounds"] == 9 and figures["acked_events"] > 50, problems
    for name in ("lost", "duplicated", "resurrected", "forgotten_readable",
                 "cross_tenant_reads", "stale_after_reads", "fuzz_crashes",
                 "fuzz_validator_misses", "unrecovered"):
        assert figures[name] == 0, f"{name}: {problems}"
    assert figures["verify_equal_rate"] == 1.0, problems
    assert figures["fuzz_dlq_rate"] == 1.0 and figures["fuzz_http_4xx_rate"] == 1.0, problems
    assert figures["fuzz_inputs"] == 1000, problems
    assert figures["consolidation_resumed_equal_rate"] == 1.0, problems
    assert figures["reads"] > 0 and figures["forgets"] > 0, problems
