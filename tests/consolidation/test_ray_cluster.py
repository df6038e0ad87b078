"""Consolidation on a Ray cluster of two nodes on loopback (a head and one worker node, each a
``ray start`` process group): the job's actors run on both nodes; the worker node is killed
(SIGKILL of its whole process group: raylet, workers, everything) mid-job and started again;
the job replaces the lost actor, which resumes from its checkpoint, and every learner ends
bit-identical to an uninterrupted run's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from memstack.foundation.settings import Settings
from memstack.infra.ray import RayConfig, non_loopback_listeners
from memstack.infra.ray.cluster import NodeShape, RayCluster, free_port
from memstack.jobs.bench.cluster_check import moved_everywhere, produce_fact_feed
from memstack.jobs.run import worker_env
from memstack.pipelines.consolidation.actor import WorkerStatus
from memstack.pipelines.consolidation.job import JobConfig, run_job
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.log_reader import end_offsets
from tests.consolidation.givens import SMALL

pytestmark = pytest.mark.slow

WINDOW = 16
USERS = 360
"""Users per tenant of the feed (1,800 records): enough that the job takes several rounds
after the first one that moves every partition (a round can apply hundreds of records: with
120 users, a CI run finished the job in the round where the last partition first moved, so
there was no round left in which to lose the node)."""


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """Head + worker node ``w1``, 2 CPUs and 150 MB of object store each; always torn down."""
    cluster = RayCluster(tmp_path_factory.mktemp("ray-home") / "ray-cluster")
    try:
        cluster.up(workers=1, shape=NodeShape(num_cpus=2), gcs_port=free_port())
        yield cluster
    finally:
        cluster.down()
        assert cluster.process_groups() == []


def _job(settings: Settings, cluster: RayCluster, centre: torch.Tensor,
         lines: list[str], on_line: object = None) -> list[WorkerStatus]:
    address = cluster.address()
    assert address is not None

    def say(line: str) -> None:
        lines.append(line)
        if callable(on_line):
            on_line(line)

    config = JobConfig(actors=2, until_caught_up=True, window=WINDOW, checkpoint_every=100_000,
                       progress_every_s=0.05, learner=SMALL)
    return run_job(settings, config, centre=centre, progress=say,
                   ray_config=RayConfig(address=address, token_path=cluster.token_path))


def _digests(statuses: list[WorkerStatus]) -> dict[str, str]:
    return {shard: d for s in statuses for shard, d in s.digests.items()}


def test_actors_on_both_nodes_and_a_killed_node_resumes_to_the_same_digests(
        ray_cluster: RayCluster, topics: Settings, minilm: MiniLMEncoder,
        centre: torch.Tensor, tmp_path: Path) -> None:
    produce_fact_feed(topics, minilm, tmp_path / "teacher.duckdb", users=USERS)
    ends = end_offsets(topics.bootstrap, f"{topics.topic_prefix}.consolidation")
    assert sum(ends.values()) > 10 * 2 * WINDOW  # many windows: the job takes many rounds
    nodes = ray_cluster.alive_nodes()
    assert set(nodes) == {"head", "w1"}
    for pgid in ray_cluster.state().nodes.values():  # type: ignore[union-attr]
        assert non_loopback_listeners(pgid) == []  # every node's ports on 127.0.0.1

    # uninterrupted: one actor per node (SPREAD)
    lines: list[str] = []
    whole = _job(topics.with_(home=tmp_path / "whole"), ray_cluster, centre, lines)
    assert {s.node for s in whole} == set(nodes.values()), lines
    assert all(s.offsets == {p: ends[p] for p in s.offsets} for s in whole)
    assert len(_digests(whole)) == 3  # acme#0, acme#1, globex

    # interrupted: after the first round, the worker node dies and comes back
    crashed: list[str] = []

    def crash_once(line: str) -> None:
        if crashed or not moved_everywhere(line):  # every actor has a checkpoint by now
            return
        crashed.append(line)
        assert ray_cluster.stop_node("w1", kill=True)
        ray_cluster.up(workers=1)  # the node again, a new node id

    lines = []
    resumed = _job(topics.with_(home=tmp_path / "resumed"), ray_cluster, centre, lines,
                   crash_once)
    assert crashed, lines  # a round moved every partition before the job's last one
    lost = [line for line in lines if "lost" in line]
    # one actor lost; its first replacement may land on the dying node too (Ray has not yet
    # marked it dead) and be lost again: every loss names the same actor, and it resumes once
    assert lost and len({line.split(" lost", 1)[0] for line in lost}) == 1, lines
    [back] = [line for line in lines if "resumed at offsets" in line]
    resumed_at = back.split("offsets {", 1)[1].split("}", 1)[0]
    assert sum(int(o.split(":")[1]) for o in resumed_at.split(",")) > 0, lines  # a checkpoint
    assert crashed[0].endswith("2 node(s)"), crashed  # before the crash: both nodes at work
    # the replacement goes wherever SPREAD puts it (the restarted w1 or the head): a live node
    assert {s.node for s in resumed} <= set(ray_cluster.alive_nodes().values()), lines
    assert [s.offsets for s in resumed] == [s.offsets for s in whole]
    assert _digests(resumed) == _digests(whole)  # bit-identical weights, every shard

    # the user's entry: `memstack consolidate --ray ADDRESS` (the token found via MEMSTACK_HOME)
    env = {**worker_env(topics.with_(home=ray_cluster.home.parent))}
    status = json.loads(_cli(env, "infra", "ray", "status", "--json"))
    assert status["running"] and set(status["nodes"]) == {"head", "w1"}
    out = _cli(env, "consolidate", "--ray", str(ray_cluster.address()), "--until-caught-up",
               "--actors", "2", "--window", str(WINDOW), "--dim", "256")
    placed = re.findall(r"on node ([0-9a-f]{12}), offsets (\{[^}]*\})", out)
    assert len({node for node, _ in placed}) == 2, out
    assert sorted(offsets for _, offsets in placed) == sorted(str(s.offsets) for s in whole)


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "memstack.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
