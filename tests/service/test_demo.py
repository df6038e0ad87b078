"""``memstack demo`` reads like a walkthrough: it starts the service, writes over HTTP and
through MCP, reads its own writes, forgets, and the forgotten item is gone; no library lines or
terminal escapes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memstack.jobs.run import worker_env
from tests.conftest import KafkaUnderTest
from tests.service.conftest import fresh_settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_demo_walks_through_write_read_forget(kafka: KafkaUnderTest,
                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    service_settings = fresh_settings(kafka, tmp_path_factory)  # its own home and service
    shots = tmp_path_factory.mktemp("ui-shots")
    done = subprocess.run([sys.executable, "-m", "memstack.cli", "demo"],
                          env={**worker_env(service_settings), "MEMSTACK_UI_SHOTS": str(shots)},
                          capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout + done.stderr
    print(done.stdout)
    out = done.stdout
    for step in ("1. starting the memory service", "2. the agent writes 10 events",
                 "3. it reads its own writes", "4. it forgets one observation",
                 "5. the memory inspector", "6. stopped"):
        assert step in out, out
    assert "valid 2026-03-15: ['Lisbon']" in out and "valid 2026-04-15: ['Porto']" in out
    assert "before the move was mentioned (known=" in out and "['Lisbon']" in out
    assert "tool assert_fact wrote" in out, out
    assert "tool facts(after=that position): Ana has_pet ['a cat named Mia']" in out, out
    assert "the forgotten observation is gone" in out
    assert "audit passed" in out and "exited 0" in out
    assert "\x1b" not in out + done.stderr
    if "screenshots skipped" not in out:  # Chromium is here: the tour saved its four steps
        assert sorted(p.name for p in shots.glob("*.png")) == [
            "1-latest.png", "2-as-of-first-write.png", "3-search-and-provenance.png",
            "4-forget-audited.png"], out
    serve_log = (service_settings.home / "demo-serve.log").read_text()
    assert "\x1b" not in serve_log and "GroupCoordinatorNotAvailable" not in serve_log
    assert " INFO " not in done.stderr and "ERROR" not in done.stderr, done.stderr
