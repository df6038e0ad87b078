"""A Flink session cluster inside this process's gateway JVM, whose Python workers are this
process's own threads: what keeps the warm replay service's jobs from starting a cluster each.

A replay on PyFlink's local environment starts a mini-cluster for its job and stops it after
(about 1 s each way on 2 cores, measured), then starts Beam workers. The session cluster is a
``MiniCluster`` started once, with its REST endpoint on the loopback address; each job is
submitted to it as to a standalone cluster (``execution.target: remote``), with
``python.loopback-server.address`` naming Beam's loopback worker pool in this process, so the
UDFs run here, beside the encoders the process keeps
(:mod:`~memstack.pipelines.replay.encoder_pool`). Connector classes come with each job (its
user-code class loader); the leaked-class-loader check is off because the Kafka client's
threads may log once after their job's loader closed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstack.pipelines.replay.flink_env import (
    FlinkRuntime,
    prepare_process_env,
    process_state_kept,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionCluster:
    """A started cluster: its REST address, its slots, and the loopback workers' address."""

    rest: str
    slots: int
    loopback: str
    work_dir: Path
    _cluster: Any

    @classmethod
    def start(cls, work_dir: Path, slots: int) -> SessionCluster:
        """Start the cluster (and the gateway JVM, if this process has none yet)."""
        from pyflink.java_gateway import get_gateway

        with process_state_kept():  # the module sets the root logger to WARNING on import
            from pyflink.fn_execution.beam.beam_worker_pool_service import (
                BeamFnLoopbackWorkerPoolServicer,
            )

        rt = FlinkRuntime(work_dir, slots, "loopback")
        prepare_process_env(rt)
        jvm = get_gateway().jvm
        conf = jvm.org.apache.flink.configuration.Configuration()
        for key, value in {"rest.bind-address": "127.0.0.1", "rest.address": "127.0.0.1",
                           "rest.port": "0", "taskmanager.numberOfTaskSlots": str(slots),
                           "io.tmp.dirs": str(rt.tmp_dir),
                           "classloader.check-leaked-classloader": "false"}.items():
            conf.setString(key, value)
        minicluster = jvm.org.apache.flink.runtime.minicluster
        config = minicluster.MiniClusterConfiguration.Builder().setConfiguration(conf) \
            .setNumTaskManagers(1).setNumSlotsPerTaskManager(slots).build()
        cluster = minicluster.MiniCluster(config)
        cluster.start()
        uri = cluster.getRestAddress().get()
        loopback = BeamFnLoopbackWorkerPoolServicer().start()
        rest = f"{uri.getHost()}:{uri.getPort()}"
        log.info("replay session cluster: %d slot(s), REST at %s, Python workers in this "
                 "process (%s)", slots, rest, loopback)
        return cls(rest, slots, loopback, work_dir, cluster)

    def runtime(self, parallelism: int) -> FlinkRuntime:
        """How a job of ``parallelism`` runs here (at most the cluster's slots)."""
        if parallelism > self.slots:
            raise ValueError(f"parallelism {parallelism} is more than the session cluster's "
                             f"{self.slots} slot(s)")
        return FlinkRuntime(self.work_dir, parallelism, "loopback", cluster=self.rest,
                            loopback_server=self.loopback)

    def close(self) -> None:
        self._cluster.close()
