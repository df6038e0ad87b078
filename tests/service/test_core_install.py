"""A fresh virtualenv with only ``pip install <checkout>`` (the core): fast, small, and enough
to round-trip an event through a running service.

Figures (install seconds, megabytes added to site-packages) are printed for the report; the
service is ``memstack serve`` of the dev environment, the client runs in the fresh venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.service.conftest import KEYS, Service

ROOT = Path(__file__).resolve().parents[2]
MAX_SECONDS = 60.0
MAX_MB = 60.0
HEAVY = ["torch", "faust", "duckdb", "lancedb", "pyflink", "ray", "numpy", "pyarrow", "fastapi",
         "aiokafka", "mcp"]

ROUND_TRIP = """
import json, sys
from memstack import MemoryService
url, key = sys.argv[1], sys.argv[2]
with MemoryService(url, key, tenant="acme", agent="core-venv") as memory:
    receipt = memory.note("s-core", "written from a core install")
    rows = memory.records("s-core", after=receipt).records
print(json.dumps({"written": receipt.event_ids, "read": [r.event_id for r in rows],
                  "text": [r.text for r in rows], "agent": [r.agent for r in rows],
                  "heavy": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)}))
"""


def _mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()
               ) / 2**20


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


@pytest.mark.slow
def test_core_install_is_small_fast_and_talks_to_the_service(service: Service,
                                                            tmp_path: Path) -> None:
    venv = tmp_path / "core"
    subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True, timeout=120)
    site = _site_packages(venv)
    before = _mb(site)
    started = time.monotonic()
    done = subprocess.run([str(venv / "bin/pip"), "install", "--disable-pip-version-check", "-q",
                           str(ROOT)], capture_output=True, text=True, timeout=600, check=False,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    added, total = _mb(site) - before, _mb(site)
    print(f"core install: {seconds:.1f} s, +{added:.1f} MB (site-packages {total:.1f} MB with "
          f"the venv's own pip/setuptools {before:.1f} MB)", file=sys.stderr)
    assert seconds < MAX_SECONDS
    assert added < MAX_MB
    code = f"HEAVY = {HEAVY!r}\n" + ROUND_TRIP
    trip = subprocess.run([str(venv / "bin/python"), "-c", code, service.url, KEYS["acme"]],
                          capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert trip.returncode == 0, trip.stderr
    answer = json.loads(trip.stdout)
    assert answer["read"] == answer["written"] and len(answer["written"]) == 1
    assert answer["text"] == ["written from a core install"] and answer["agent"] == ["core-venv"]
    assert answer["heavy"] == []
    server_cmd = subprocess.run([str(venv / "bin/memstack"), "run"], capture_output=True,
                                text=True, timeout=120, check=False, cwd=tmp_path)
    assert server_cmd.returncode == 2 and "pip install 'memstack[server]'" in server_cmd.stderr
