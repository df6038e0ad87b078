"""The stdout contract of ``--json``: one JSON line on stdout, everything else on stderr."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memstack.jobs.measure import Result

ROOT = Path(__file__).resolve().parents[2]

NOISY = textwrap.dedent("""
    import atexit, os, subprocess, sys
    from memstack.jobs.measure import Result, json_stdout

    atexit.register(lambda: sys.stdout.write("\\x1b[?25h"))  # what Faust writes on shutdown
    with json_stdout() as out:
        print("a progress line")
        os.write(1, b"raw bytes on fd 1\\n")
        subprocess.run(["sh", "-c", "echo a child process, like the JVM"], check=True)
        print(Result("noisy", {"x": 1.0}, ratio=0.5).to_json(), file=out)
    print("after the guard")
""")


def test_json_stdout_keeps_only_the_result_line_on_stdout() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", NOISY], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    assert json.loads(lines[0]) == {"name": "noisy", "ratio": 0.5, "figures": {"x": 1.0},
                                    "plots": []}
    for noise in ("a progress line", "raw bytes on fd 1", "a child process",
                  "after the guard", "\x1b[?25h"):
        assert noise in done.stderr


def test_result_json_is_one_line_and_keeps_small_magnitudes() -> None:
    text = Result("r", {"tiny": 8.85e-17, "big": 123456789.0}).to_json()
    assert "\n" not in text
    body = json.loads(text)
    assert body["figures"] == {"tiny": 8.85e-17, "big": 123457000.0}
    assert "ratio" not in body


def test_result_json_is_strict_json_without_nan() -> None:
    body = json.loads(Result("r", {"never": float("nan"), "inf": float("inf")}, ratio=float(
        "nan")).to_json().replace("NaN", "BROKEN"))
    assert body["figures"] == {"never": None, "inf": None} and body["ratio"] is None


def test_seed_and_rounds_only_for_measurements_that_take_them() -> None:
    import argparse

    import pytest

    from memstack.jobs.commands.measure import _runner
    from memstack.jobs.measure import UnknownMeasurementError

    args = argparse.Namespace(name="stale", quick=True, seed=3, rounds=None)
    with pytest.raises(UnknownMeasurementError, match="takes no --seed"):
        _runner("eval")(args)


def test_bench_help_from_a_checkout() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for family in ("bench", "eval"):
        done = subprocess.run([sys.executable, "-m", "memstack.cli", family, "--help"],
                              capture_output=True, text=True, env=env, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert "--quick" in done.stdout


def test_a_helper_module_is_no_measurement() -> None:
    from memstack.jobs.measure import UnknownMeasurementError, load

    with pytest.raises(UnknownMeasurementError, match="is a helper"):
        load("bench", "workload")
    with pytest.raises(UnknownMeasurementError, match="no eval named 'nothing'"):
        load("eval", "nothing")


def test_without_the_lab_bench_and_eval_say_to_use_a_checkout(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """An installed wheel has no memstack.jobs.bench/eval (tests/test_layout.py builds one):
    the commands still parse, and answer with where the lab is, exit status 2, no traceback."""
    from memstack import cli
    from memstack.jobs.measure import LabNotInstalledError, load

    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        if name in ("memstack.jobs.bench", "memstack.jobs.eval"):
            return None
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(LabNotInstalledError, match="ship with a checkout"):
        load("bench", "forget")
    for family in ("bench", "eval"):
        assert cli.main([family, "forget", "--quick", "--json"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("memstack: error: the benchmarks and evaluations ship with a "
                              "checkout")
        assert "make install" in err and f".venv/bin/memstack {family} forget" in err
