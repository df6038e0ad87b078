"""The cluster helpers' pure parts: generated Flink config, recorded states, address checks.
(The clusters themselves run in tests/integration/test_replay_cluster.py and
tests/consolidation/test_ray_cluster.py, marked slow.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack.foundation.settings import Settings
from memstack.infra.flink.cluster import (
    ClusterShape,
    ClusterState,
    FlinkCluster,
    memstack_root,
    rest_get,
)
from memstack.infra.net import free_port_pair
from memstack.infra.ray import RayConfig, _on_loopback, cluster_token
from memstack.infra.ray.cluster import NodeShape, RayCluster, RayClusterState, node_resource
from memstack.infra.ray.paths import short_temp_dir
from memstack.pipelines.replay.errors import FlinkClusterUnavailableError
from memstack.pipelines.replay.flink_env import check_cluster


def test_flink_config_binds_loopback_and_runs_this_python(tmp_path: Path) -> None:
    import sys

    config = FlinkCluster(tmp_path).config(ClusterShape(rest_port=40001, rpc_port=40002,
                                                        taskmanagers=3, slots=2))
    for key in ("jobmanager.rpc.address", "jobmanager.bind-host", "taskmanager.host",
                "taskmanager.bind-host", "rest.address", "rest.bind-address"):
        assert config[key] == "127.0.0.1", key
    assert config["rest.port"] == "40001" and config["jobmanager.rpc.port"] == "40002"
    assert config["taskmanager.numberOfTaskSlots"] == "2"
    assert config["python.executable"] == sys.executable
    assert (Path(config["python.pythonpath"]) / "memstack" / "__init__.py").is_file()
    assert Path(config["python.pythonpath"]) == memstack_root()
    assert "--add-opens=java.base/java.lang=ALL-UNNAMED" in config["env.java.opts.all"]
    assert config["io.tmp.dirs"].startswith(str(tmp_path))  # nothing in /tmp or site-packages


def test_flink_state_round_trips_and_nothing_runs_without_one(tmp_path: Path) -> None:
    state = ClusterState(ClusterShape(taskmanagers=2), 11, [12, 13])
    assert ClusterState.from_json(state.to_json()) == state
    cluster = FlinkCluster(tmp_path)
    assert not cluster.status().running and cluster.stop() == []
    assert cluster.process_groups() == []


def test_replay_refuses_bad_cluster_addresses_before_any_work() -> None:
    for bad in ("localhost", "127.0.0.1:http", ":8081"):
        with pytest.raises(FlinkClusterUnavailableError, match="HOST:PORT"):
            check_cluster(bad, 2, "process")
    with pytest.raises(FlinkClusterUnavailableError, match="worker-mode process"):
        check_cluster("127.0.0.1:1", 2, "loopback")
    port, _ = free_port_pair()
    assert rest_get(f"127.0.0.1:{port}", "/overview", timeout_s=1) is None
    with pytest.raises(FlinkClusterUnavailableError, match="memstack infra flink up"):
        check_cluster(f"127.0.0.1:{port}", 2, "process")


def test_ray_cluster_state_and_node_labels(tmp_path: Path) -> None:
    state = RayClusterState(40000, NodeShape(num_cpus=2), {"head": 5, "w1": 6})
    back = RayClusterState.from_json(state.to_json())
    assert back == state and back.address == "127.0.0.1:40000"
    assert node_resource("w1") == "memstack_node_w1"
    cluster = RayCluster(tmp_path / "ray-cluster")
    assert cluster.address() is None and cluster.down() == [] and cluster.node_report() == {}
    env = cluster.auth_env()
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"].startswith(
        str(tmp_path))  # never ~/.ray, which every cluster of the user shares


def test_a_driver_finds_the_token_of_the_cluster_under_its_home(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    cluster = RayCluster(tmp_path / "ray-cluster")
    cluster.home.mkdir(parents=True)
    (cluster.home / "cluster.json").write_text(
        RayClusterState(40000, NodeShape(), {"head": 999_999_999}).to_json())  # no such process
    assert cluster_token(settings, "127.0.0.1:40000") == cluster.token_path
    assert cluster_token(settings, "127.0.0.1:40001") is None
    assert cluster_token(settings, None) is None
    joined = RayConfig().joining("127.0.0.1:40000", settings)
    assert not joined.local and joined.token_path == cluster.token_path
    assert _on_loopback("127.0.0.1:40000") and _on_loopback("ray://localhost:10001")
    assert not _on_loopback("10.0.0.5:6379") and not _on_loopback(None)


def test_ray_temp_dirs_leave_room_for_its_socket_paths(tmp_path: Path) -> None:
    session = "session_2026-12-01_05-51-28_495881_29960/sockets/plasma_store.1"
    for wanted in (tmp_path / ("x" * 40) / "ray-cluster" / "tmp" / "w1", Path("/tmp/" + "y" * 35)):
        assert len(str(short_temp_dir(wanted) / session)) <= 107
    cluster = RayCluster(tmp_path / "ray-cluster")
    assert len(str(cluster._temp_dir("w1") / session)) <= 107



def test_the_crash_waits_for_a_round_that_moved_every_partition_before_the_last() -> None:
    from memstack.jobs.bench.cluster_check import moved_everywhere

    line = "offsets {0: 32, 2: 16, 1: 0} of {0: 170, 1: 240, 2: 190}; 3 live item(s)"
    assert not moved_everywhere(line)
    assert moved_everywhere(line.replace("1: 0}", "1: 48}", 1))
    # the round that ends the job is no crash point: no further round would notice it
    assert not moved_everywhere("offsets {0: 170, 2: 190, 1: 240} of {0: 170, 1: 240, 2: 190}")
    assert not moved_everywhere("consolidating t.consolidation: 2 actor(s) over partitions")
