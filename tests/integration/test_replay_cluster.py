"""Replay submitted to a standalone Flink cluster (a JobManager and 2 TaskManager processes,
started by ``memstack infra flink up``): the stores verify equal to the live worker's.

The cluster always goes down (the fixture's ``finally``), and the test checks that no process
of its groups (JVMs or Python workers) is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstack.foundation.settings import Settings
from memstack.infra.flink.cluster import FlinkCluster, rest_get
from memstack.infra.net import free_port_pair
from memstack.jobs.run import worker_env
from tests.conftest import KafkaUnderTest, settings_on_fresh_topics

pytestmark = pytest.mark.slow


def _cli(settings: Settings, *args: str, timeout: float = 300) -> str:
    done = subprocess.run([sys.executable, "-m", "memstack.cli", *args],
                          env=worker_env(settings), capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"memstack {' '.join(args)}: {done.stderr[-4000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def cluster_log(kafka: KafkaUnderTest, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    from tests.integration.test_replay import _emit_log

    settings = settings_on_fresh_topics(kafka, tmp_path_factory.mktemp("flink-home"),
                                        "t-flinkcluster")
    _emit_log(settings, sessions=6)
    return settings


@pytest.fixture(scope="module")
def flink_cluster(cluster_log: Settings) -> Iterator[str]:
    """``memstack infra flink up --taskmanagers 2`` on free ports; always torn down."""
    cluster = FlinkCluster(cluster_log.home / "flink")
    rest_port, _ = free_port_pair()
    try:
        out = _cli(cluster_log, "infra", "flink", "up", "--taskmanagers", "2", "--port",
                   str(rest_port))
        assert f"127.0.0.1:{rest_port}" in out
        yield f"127.0.0.1:{rest_port}"
        out = _cli(cluster_log, "infra", "flink", "down")
        assert "stopped flink process groups" in out
    finally:
        cluster.stop()
        assert cluster.process_groups() == []


def test_replay_on_a_standalone_cluster_verifies_equal_to_live(
        cluster_log: Settings, flink_cluster: str, tmp_path: Path) -> None:
    from memstack.infra.ray import non_loopback_listeners
    from tests.integration.test_replay import _live

    status = json.loads(_cli(cluster_log, "infra", "flink", "status", "--json"))
    assert status["running"] and status["registered"] == 2 and status["slots_total"] == 2
    for pid in [status["jobmanager"], *status["taskmanagers"]]:
        assert non_loopback_listeners(pid) == []  # every port of the cluster on 127.0.0.1

    live = _live(cluster_log, tmp_path / "live")
    summary = json.loads(_cli(cluster_log, "replay", "--flink", flink_cluster,
                              "--parallelism", "2", "--into", str(tmp_path / "replayed"))
                         .strip().splitlines()[-1])
    assert summary["applied"] > 0
    verdict = json.loads(_cli(cluster_log, "verify", str(live), str(tmp_path / "replayed"),
                              "--json"))
    assert verdict["equal"], verdict

    # the job ran on the cluster, its prepare stage on both TaskManagers
    jobs = (rest_get(flink_cluster, "/jobs/overview") or {})["jobs"]
    [job] = [j for j in jobs if j["name"] == "memstack-replay"]
    assert job["state"] == "FINISHED"
    detail = rest_get(flink_cluster, f"/jobs/{job['jid']}") or {}
    [prepare] = [v for v in detail["vertices"] if "prepare" in v["name"]]
    subtasks = (rest_get(flink_cluster, f"/jobs/{job['jid']}/vertices/{prepare['id']}")
                or {})["subtasks"]
    assert prepare["parallelism"] == 2
    assert len({s["taskmanager-id"] for s in subtasks}) == 2


def test_replay_refuses_a_cluster_that_is_not_there(cluster_log: Settings,
                                                    tmp_path: Path) -> None:
    port, _ = free_port_pair()
    done = subprocess.run([sys.executable, "-m", "memstack.cli", "replay", "--flink",
                           f"127.0.0.1:{port}", "--into", str(tmp_path / "x")],
                          env=worker_env(cluster_log), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode != 0
    assert "memstack infra flink up" in done.stderr
    assert not (tmp_path / "x").exists()
