"""PyFlink's local runtime, configured so that nothing lands in site-packages or /tmp.

Before the gateway JVM starts (once per Python process): ``FLINK_LOG_DIR``, ``TMPDIR`` and
``-Djava.io.tmpdir`` point into ``work_dir``. UDF workers run ``python.executable``, set to this
interpreter (the venv's), never ``python`` from PATH. ``worker_mode`` chooses where UDFs run:
``process`` (one Python worker process per slot, real parallelism, as on a cluster) or
``loopback`` (threads in this process: faster to start, but one GIL).

With ``cluster`` (``HOST:PORT``, a standalone cluster's REST address) the job is submitted there
(``execution.target: remote``) instead: the UDFs run in Python workers the TaskManagers start,
with ``python.executable`` (this interpreter) and ``python.pythonpath`` (the folder holding the
``memstack`` package this process imports), both paths on the TaskManagers' machine.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from memstack.infra.flink.jars import pipeline_jars
from memstack.pipelines.replay.errors import FlinkClusterUnavailableError

if TYPE_CHECKING:
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

log = logging.getLogger(__name__)

WorkerMode = Literal["process", "loopback"]


@dataclass(frozen=True)
class FlinkRuntime:
    """Where the local mini-cluster keeps logs and temp files, and how wide it runs."""

    work_dir: Path
    parallelism: int = 1
    worker_mode: WorkerMode = "process"
    bundle_size: int = 1000
    """Records per Python bundle (``python.fn-execution.bundle.size``)."""
    bundle_time_ms: int = 200
    cluster: str | None = None
    """REST address ``HOST:PORT`` of a standalone cluster to submit to (None: mini-cluster)."""
    loopback_server: str | None = None
    """With ``cluster``: the cluster runs in this process's JVM and its Python workers are
    Beam's loopback pool at this address, in this process
    (:mod:`~memstack.pipelines.replay.session_cluster`)."""

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "log"

    @property
    def tmp_dir(self) -> Path:
        return self.work_dir / "tmp"


@contextmanager
def process_state_kept() -> Iterator[None]:
    """Run a job and leave the process's environment and root logger as they were: PyFlink
    and Beam's loopback worker set some forty variables (among them one that forbids this
    process and its children to start another job), and the loopback worker replaces the
    root logger's handlers with one that sends records to the JVM's log."""
    saved = dict(os.environ)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        root.handlers[:] = handlers
        root.setLevel(level)


def prepare_process_env(rt: FlinkRuntime) -> None:
    """Set the variables the gateway JVM reads at launch (a no-op for an already running one)."""
    rt.log_dir.mkdir(parents=True, exist_ok=True)
    rt.tmp_dir.mkdir(parents=True, exist_ok=True)
    os.environ["FLINK_LOG_DIR"] = str(rt.log_dir)
    os.environ["TMPDIR"] = str(rt.tmp_dir)
    os.environ["JVM_ARGS"] = f"-Djava.io.tmpdir={rt.tmp_dir}"
    # PyFlink reads this lower-case name (stream_execution_environment._open); it refuses
    # "loopback" for a remote target, so a session cluster's jobs name their pool themselves
    mode = "process" if rt.loopback_server is not None else rt.worker_mode
    os.environ["_python_worker_execution_mode"] = mode  # noqa: SIM112


def create_envs(rt: FlinkRuntime) -> tuple[StreamExecutionEnvironment, StreamTableEnvironment]:
    """A streaming environment (bounded input ends the job) and its table environment."""
    prepare_process_env(rt)
    from pyflink.common import Configuration
    from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    conf = Configuration()
    conf.set_string("pipeline.jars", pipeline_jars())
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    conf.set_string("io.tmp.dirs", str(rt.tmp_dir))
    conf.set_string("python.fn-execution.bundle.size", str(rt.bundle_size))
    conf.set_string("python.fn-execution.bundle.time", str(rt.bundle_time_ms))
    if rt.cluster is None:
        conf.set_string("taskmanager.numberOfTaskSlots", str(max(1, rt.parallelism)))
        conf.set_string("rest.bind-address", "127.0.0.1")
        conf.set_string("rest.address", "127.0.0.1")
        env = StreamExecutionEnvironment.get_execution_environment(conf)
    else:
        if rt.loopback_server is not None:
            conf.set_string("python.loopback-server.address", rt.loopback_server)
        env = _remote_env(conf, rt.cluster)
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    env.set_parallelism(rt.parallelism)
    tenv = StreamTableEnvironment.create(env)
    tenv.get_config().set("table.local-time-zone", "UTC")
    log.info("flink: parallelism %d on %s, python workers in %s mode (%s), logs in %s",
             rt.parallelism, rt.cluster or "the mini-cluster", rt.worker_mode, sys.executable,
             rt.log_dir)
    return env, tenv


def _remote_env(conf: Any, cluster: str) -> StreamExecutionEnvironment:
    """An environment that submits to the standalone cluster whose REST address is ``cluster``.

    Built from the configuration (its executor follows ``execution.target``): PyFlink's
    ``get_execution_environment`` outside ``flink run`` always makes a local one.
    """
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.java_gateway import get_gateway

    from memstack.infra.flink.cluster import memstack_root

    host, _, port = cluster.rpartition(":")
    conf.set_string("execution.target", "remote")
    conf.set_string("rest.address", host)
    conf.set_string("rest.port", port)
    conf.set_string("python.pythonpath", str(memstack_root()))
    jvm_env = get_gateway().jvm.org.apache.flink.streaming.api.environment
    return StreamExecutionEnvironment(jvm_env.StreamExecutionEnvironment(conf._j_configuration))


def check_cluster(cluster: str, parallelism: int, worker_mode: WorkerMode) -> None:
    """Fail before planning when the cluster at ``cluster`` cannot run the job."""
    from memstack.infra.flink.cluster import rest_get

    host, _, port = cluster.rpartition(":")
    if not host or not port.isdigit():
        raise FlinkClusterUnavailableError(
            f"--flink {cluster!r} must be HOST:PORT, the cluster's REST address "
            "(`memstack infra flink status` prints it)")
    if worker_mode != "process":
        raise FlinkClusterUnavailableError(
            "on a cluster the Python workers run in the TaskManagers: use --worker-mode process")
    overview = rest_get(cluster, "/overview")
    if overview is None:
        raise FlinkClusterUnavailableError(
            f"no Flink cluster answers at http://{cluster}/overview; start one with "
            "`memstack infra flink up` or pass the address `memstack infra flink status` prints")
    slots = int(overview.get("slots-total", 0))
    if slots < parallelism:
        raise FlinkClusterUnavailableError(
            f"the cluster at {cluster} has {slots} task slot(s) and the replay asks for "
            f"parallelism {parallelism}: pass --parallelism {max(1, slots)} or start more "
            "TaskManagers (`memstack infra flink up --taskmanagers N`)")
