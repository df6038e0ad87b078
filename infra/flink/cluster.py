"""A standalone Flink cluster on this machine, from the distribution inside the PyFlink wheel.

PyFlink ships Flink's scripts (``pyflink/bin/jobmanager.sh``, ``taskmanager.sh``) and jars
(``pyflink/lib/flink-dist-*.jar``); :class:`FlinkCluster` runs them with everything it owns in
one folder (``<MEMSTACK_HOME>/flink``):

- ``conf/config.yaml``: generated; every address and bind host 127.0.0.1, small memory, the REST
  and RPC ports, this interpreter as the Python workers' ``python.executable``;
- ``lib/``: links to PyFlink's ``lib/*.jar``, its ``opt/flink-python-*.jar`` (TaskManagers run
  Python UDFs with it) and the Kafka connector the replay resolves with Maven;
- ``log/``, ``tmp/``, ``pid/`` and ``cluster.json`` (the pids and ports of the running cluster).

Each process is started with ``<script> start-foreground`` in its own session (the script execs
the JVM, so the pid is the JVM's and the process group holds the Python workers it forks):
:meth:`FlinkCluster.stop` ends every process group it started and waits until none is left.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memstack.infra.errors import FlinkClusterError, PortInUseError
from memstack.infra.flink.jars import connector_jars
from memstack.infra.net import port_is_free
from memstack.infra.process_groups import group_members

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
DEFAULT_REST_PORT = 38081
"""Far from Flink's 8081, as the broker's 39092 is from Kafka's 9092."""
STATE_FILE = "cluster.json"


def pyflink_dir() -> Path:
    import pyflink

    return Path(pyflink.__file__).resolve().parent


def memstack_root() -> Path:
    """The folder holding the ``memstack`` package this process imports (its ``sys.path``
    entry): the Python workers put it on their path (``python.pythonpath``). Found by its
    spec, so infra imports nothing of the facade above it."""
    import importlib.util

    spec = importlib.util.find_spec("memstack")
    if spec is None or spec.origin is None:
        raise FlinkClusterError("the memstack package is not importable in this process")
    return Path(spec.origin).resolve().parent.parent


@dataclass(frozen=True)
class ClusterShape:
    """How big the cluster is and where it listens."""

    rest_port: int = DEFAULT_REST_PORT
    rpc_port: int = DEFAULT_REST_PORT + 1
    taskmanagers: int = 2
    slots: int = 1
    """Task slots per TaskManager: the job's parallelism spreads over ``taskmanagers * slots``."""
    taskmanager_memory: str = "1280m"
    jobmanager_memory: str = "800m"


@dataclass
class ClusterState:
    """What ``cluster.json`` records while the cluster runs."""

    shape: ClusterShape
    jobmanager: int
    taskmanagers: list[int] = field(default_factory=list)

    def pids(self) -> list[int]:
        return [self.jobmanager, *self.taskmanagers]

    def to_json(self) -> str:
        return json.dumps({"shape": asdict(self.shape), "jobmanager": self.jobmanager,
                           "taskmanagers": self.taskmanagers}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        body = json.loads(text)
        return cls(ClusterShape(**body["shape"]), int(body["jobmanager"]),
                   [int(p) for p in body["taskmanagers"]])


@dataclass(frozen=True)
class ClusterStatus:
    running: bool
    rest: str | None
    jobmanager: int | None
    taskmanagers: list[int]
    registered: int
    """TaskManagers the JobManager knows (its REST ``/overview``); -1 when it does not answer."""
    slots_total: int
    home: Path

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["home"] = str(self.home)
        return out


class FlinkCluster:
    """One standalone cluster whose files live in ``home``; start and stop are idempotent."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home).resolve()

    # -- folders ----------------------------------------------------------------------------

    @property
    def conf_dir(self) -> Path:
        return self.home / "conf"

    @property
    def lib_dir(self) -> Path:
        return self.home / "lib"

    @property
    def log_dir(self) -> Path:
        return self.home / "log"

    @property
    def tmp_dir(self) -> Path:
        return self.home / "tmp"

    def config(self, shape: ClusterShape) -> dict[str, str]:
        """``conf/config.yaml``, flat keys."""
        return {
            "jobmanager.rpc.address": LOOPBACK,
            "jobmanager.rpc.port": str(shape.rpc_port),
            "jobmanager.bind-host": LOOPBACK,
            "jobmanager.memory.process.size": shape.jobmanager_memory,
            "jobmanager.execution.failover-strategy": "region",
            "taskmanager.host": LOOPBACK,
            "taskmanager.bind-host": LOOPBACK,
            "taskmanager.numberOfTaskSlots": str(shape.slots),
            "taskmanager.memory.process.size": shape.taskmanager_memory,
            "taskmanager.memory.managed.fraction": "0.2",
            "rest.address": LOOPBACK,
            "rest.bind-address": LOOPBACK,
            "rest.port": str(shape.rest_port),
            "parallelism.default": "1",
            "restart-strategy.type": "none",
            "io.tmp.dirs": str(self.tmp_dir),
            "web.tmpdir": str(self.tmp_dir / "web"),
            "env.log.dir": str(self.log_dir),
            "env.pid.dir": str(self.home / "pid"),
            "python.executable": sys.executable,
            "python.client.executable": sys.executable,
            "python.pythonpath": str(memstack_root()),
            "env.java.opts.all": _shipped_java_opts(),
        }

    def prepare(self, shape: ClusterShape) -> None:
        """Write the configuration and link the jars (no process started)."""
        for d in (self.conf_dir, self.lib_dir, self.log_dir, self.tmp_dir, self.home / "pid"):
            d.mkdir(parents=True, exist_ok=True)
        shipped = pyflink_dir()
        for name in ("log4j-console.properties", "log4j.properties", "logback-console.xml"):
            source = shipped / "conf" / name
            if source.is_file():
                (self.conf_dir / name).write_bytes(source.read_bytes())
        body = "".join(f"{k}: {json.dumps(v)}\n" for k, v in self.config(shape).items())
        (self.conf_dir / "config.yaml").write_text("# written by memstack.infra.flink.cluster\n"
                                                   + body)
        jars = [*sorted((shipped / "lib").glob("*.jar")),
                *sorted((shipped / "opt").glob("flink-python-*.jar")), *connector_jars()]
        for old in self.lib_dir.glob("*.jar"):
            old.unlink()
        for jar in jars:
            (self.lib_dir / jar.name).symlink_to(jar.resolve())

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, shape: ClusterShape, timeout_s: float = 120) -> ClusterStatus:
        """Start a JobManager and ``shape.taskmanagers`` TaskManagers unless the cluster runs;
        return once every TaskManager registered with the JobManager."""
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / "start.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self._state()
            if state is not None:
                self._wait_registered(state, timeout_s)
                return self.status()
            for port in (shape.rest_port, shape.rpc_port):
                if not port_is_free(LOOPBACK, port):
                    raise PortInUseError(
                        f"port {LOOPBACK}:{port} is in use, so the Flink cluster cannot listen "
                        f"there; stop that process (`ss -ltnp 'sport = :{port}'`) or pass "
                        "another `memstack infra flink up --port`")
            self.prepare(shape)
            state = ClusterState(shape, self._spawn("jobmanager"))
            self._save(state)
            try:
                for _ in range(shape.taskmanagers):
                    state.taskmanagers.append(self._spawn("taskmanager"))
                    self._save(state)
                self._wait_registered(state, timeout_s)
            except BaseException:
                self.stop()
                raise
        return self.status()

    def stop(self, timeout_s: float = 30) -> list[int]:
        """End every process group this cluster started (TaskManagers first); return the pids
        that were running."""
        state = self._state(prune=False)
        if state is None:
            return []
        groups = [p for p in [*state.taskmanagers, state.jobmanager] if _group_alive(p)]
        for pid in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while any(_group_alive(p) for p in groups) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in groups:
            if _group_alive(pid):
                log.warning("flink process group %d outlived SIGTERM for %.0f s; killing it",
                            pid, timeout_s)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_group_alive(p) for p in groups) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [p for p in groups if _group_alive(p)]
        if left:
            raise FlinkClusterError(f"Flink process groups {left} survived SIGKILL; check "
                                    f"`ps -o pid,pgid,cmd -g {left[0]}`")
        (self.home / STATE_FILE).unlink(missing_ok=True)
        return groups

    def status(self) -> ClusterStatus:
        state = self._state()
        if state is None:
            return ClusterStatus(False, None, None, [], 0, 0, self.home)
        overview = self.overview(state.shape)
        return ClusterStatus(True, f"{LOOPBACK}:{state.shape.rest_port}", state.jobmanager,
                             state.taskmanagers,
                             int(overview.get("taskmanagers", -1)) if overview else -1,
                             int(overview.get("slots-total", 0)) if overview else 0, self.home)

    def overview(self, shape: ClusterShape) -> dict[str, Any] | None:
        """The JobManager's REST ``/overview``, or None when it does not answer."""
        return rest_get(f"{LOOPBACK}:{shape.rest_port}", "/overview")

    def process_groups(self) -> list[int]:
        """Every live process in the groups this cluster started (JVMs and Python workers)."""
        state = self._state(prune=False)
        return [] if state is None else [p for g in state.pids() for p in group_members(g)]

    def log_tail(self, lines: int = 30) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*.log")) + sorted(self.log_dir.glob("*.out")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path} ---\n" + "\n".join(text))
        return "\n".join(parts) or f"(no log in {self.log_dir})"

    # -- internals ----------------------------------------------------------------------------

    def _spawn(self, role: str) -> int:
        script = pyflink_dir() / "bin" / f"{role}.sh"
        env = {**os.environ, "FLINK_CONF_DIR": str(self.conf_dir),
               "FLINK_LIB_DIR": str(self.lib_dir), "FLINK_LOG_DIR": str(self.log_dir),
               "FLINK_PID_DIR": str(self.home / "pid"), "TMPDIR": str(self.tmp_dir)}
        with (self.log_dir / f"{role}.out").open("ab") as out:
            proc = subprocess.Popen(["bash", str(script), "start-foreground"], env=env,
                                    stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, cwd=self.home,
                                    start_new_session=True)
        log.info("flink %s: pid %d", role, proc.pid)
        return proc.pid

    def _wait_registered(self, state: ClusterState, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [p for p in state.pids() if not _group_alive(p)]
            if dead:
                raise FlinkClusterError(
                    f"Flink process(es) {dead} exited during start-up; the logs are in "
                    f"{self.log_dir}.\n{self.log_tail()}")
            overview = self.overview(state.shape)
            if overview and int(overview.get("taskmanagers", 0)) >= len(state.taskmanagers):
                return
            time.sleep(0.5)
        raise FlinkClusterError(
            f"the Flink cluster in {self.home} did not register {len(state.taskmanagers)} "
            f"TaskManager(s) within {timeout_s:.0f} s (it was stopped); pass a longer "
            f"`--timeout` on a busy machine. Logs: {self.log_dir}.\n{self.log_tail()}")

    def _save(self, state: ClusterState) -> None:
        path = self.home / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(path)

    def _state(self, *, prune: bool = True) -> ClusterState | None:
        """The recorded cluster; with ``prune``, None (and the record removed) when its
        JobManager is gone (the TaskManagers, if any, are stopped then)."""
        path = self.home / STATE_FILE
        try:
            state = ClusterState.from_json(path.read_text())
        except (FileNotFoundError, ValueError, KeyError):
            return None
        if prune and not _group_alive(state.jobmanager):
            self.stop()
            return None
        return state


def rest_get(address: str, path: str, timeout_s: float = 3.0) -> dict[str, Any] | None:
    """GET ``http://address/path`` of a Flink REST endpoint as JSON; None when unreachable."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout_s) as reply:
            body: dict[str, Any] = json.loads(reply.read())
            return body
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _shipped_java_opts() -> str:
    """The JVM options of PyFlink's own ``conf/config.yaml`` (Java 17 module openings)."""
    import yaml  # type: ignore[import-untyped]  # PyYAML (via apache-beam) ships no stubs

    body = yaml.safe_load((pyflink_dir() / "conf" / "config.yaml").read_text()) or {}
    opts = body.get("env", {}).get("java", {}).get("opts", {}).get("all", "")
    return str(opts)


def _group_alive(pgid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, os.WNOHANG)  # reap our own child, so it leaves no zombie
    return bool(group_members(pgid))
