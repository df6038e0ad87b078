"""The warm replay service (``memstack replay-service``, a child process with its own
session cluster and loopback workers) against the real broker: a job submitted with
``memstack replay --service`` builds stores equal to the one-process rebuild's, bad requests
get problem details naming the field, a second job while one runs gets 409, and SIGTERM stops
the service cleanly (checked when the module's service stops).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from memstack.foundation.settings import Settings
from memstack.jobs.replay_service.client import health, submit
from memstack.jobs.replay_service.request import ReplayRequest
from memstack.jobs.replay_service.service_process import ServiceProcess, stop
from memstack.jobs.run import worker_env
from memstack.pipelines.replay.verify import compare
from tests.conftest import KafkaUnderTest, settings_on_fresh_topics

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service_log(kafka: KafkaUnderTest, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    from tests.integration.test_replay import _emit_log

    settings = settings_on_fresh_topics(kafka, tmp_path_factory.mktemp("replay-service-home"),
                                        "t-replaysvc")
    _emit_log(settings, sessions=6)
    return settings


@pytest.fixture(scope="module")
def service(service_log: Settings,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One service for the module; its stop is checked too: SIGTERM, exit 0, its jobs
    counted in its last log line."""
    with ServiceProcess.start(service_log, tmp_path_factory.mktemp("replay-service"), 2) as svc:
        yield svc
        done = health(svc.url)["jobs_done"]
        assert stop(svc.proc) == 0, svc.log_path.read_text()[-3000:]
    assert f"stopped after {done} job(s)" in svc.log_path.read_text()


def _post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.request("POST", "/replays", body=body,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_the_service_is_warm_and_left_no_scratch_stores(service: ServiceProcess) -> None:
    state = health(service.url)
    assert state["status"] == "ready" and state["running"] is None
    assert state["warm_up_s"] > 0
    assert not (service.log_path.parent / "flink" / "warm-up-stores").exists()


def test_a_job_on_the_service_equals_the_rebuild(service_log: Settings,
                                                  service: ServiceProcess,
                                                  tmp_path: Path) -> None:
    from tests.integration.test_replay import _reference

    reference = _reference(service_log, tmp_path / "rebuild")
    into = tmp_path / "on-service"
    done = subprocess.run(
        [sys.executable, "-m", "memstack.cli", "replay", "--service", service.url,
         "--parallelism", "2", "--into", str(into)],
        env=worker_env(service_log), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["applied"] > 0 and summary["first_at"] <= summary["last_at"]
    diff = compare(reference, into)
    assert diff.equal, diff
    # a second job into the same stores catches them up: nothing left to apply
    again = submit(service.url, ReplayRequest(into=str(into), parallelism=1))
    assert again["applied"] == 0
    assert compare(reference, into).equal


@pytest.mark.parametrize(("body", "field"), [
    ({"into": "relative/stores"}, "into"),
    ({"into": "/tmp/x", "from": "yesterday"}, "from"),
    ({"into": "/tmp/x", "parallelism": 0}, "parallelism"),
    ({"into": "/tmp/x", "parallelism": 3}, "parallelism"),  # more than the 2 slots
    ({"into": "/tmp/x", "workers": "many"}, "workers"),
])
def test_a_bad_request_gets_422_naming_the_field(service: ServiceProcess,
                                                 body: dict[str, Any], field: str) -> None:
    status, problem = _post(service.url, json.dumps(body).encode())
    assert status == 422, problem
    assert problem["field"] == field and field in problem["detail"]
    assert health(service.url)["running"] is None  # nothing started


def test_a_second_job_while_one_runs_gets_409(service: ServiceProcess, tmp_path: Path) -> None:
    first: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: first.update(submit(
        service.url, ReplayRequest(into=str(tmp_path / "first"), parallelism=2))))
    runner.start()
    try:
        while health(service.url)["running"] is None and runner.is_alive():
            time.sleep(0.01)
        status, problem = _post(service.url, json.dumps(
            {"into": str(tmp_path / "second")}).encode())
        assert status == 409, problem
        assert str(tmp_path / "first") in problem["detail"]
    finally:
        runner.join(timeout=300)
    assert first["applied"] > 0
    assert not (tmp_path / "second").exists()
