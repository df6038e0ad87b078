"""A Ray cluster of several nodes on this machine: a head and worker nodes, each one ``ray
start --block`` process (and the GCS, raylet and workers it starts) in its own process group.

Everything lives in ``<MEMSTACK_HOME>/ray-cluster``: ``cluster.json`` (the GCS port and each
node's process group), ``auth_token`` (Ray's token authentication, one token per cluster, never
``~/.ray``), ``nodes/<name>.out`` (each ``ray start``'s output) and a short temp dir per node
(Ray's unix sockets; two nodes on one machine must not share one).

Loopback only. Ray rewrites 127.0.0.1 to the host's external address whenever multi-node
clusters are enabled (``services.resolve_ip_for_localhost``), and worker nodes refuse to start
when they are not; so each node runs through :mod:`memstack.infra.ray.node`, which keeps a
loopback address as given. Every node carries a resource ``memstack_node_<name>: 1`` so actors
can be pinned and placements read back.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from memstack.infra.errors import RayClusterError
from memstack.infra.process_groups import group_members
from memstack.infra.ray.paths import short_temp_dir

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
DEFAULT_GCS_PORT = 36379
"""Far from Ray's 6379."""
HEAD = "head"
STATE_FILE = "cluster.json"
TOKEN_FILE = "auth_token"


def node_resource(name: str) -> str:
    """The custom resource that marks node ``name`` (``memstack_node_head``, ``..._w1``)."""
    return f"memstack_node_{name}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class NodeShape:
    num_cpus: int = 2
    object_store_bytes: int = 150 * 1024 * 1024


@dataclass
class RayClusterState:
    gcs_port: int
    shape: NodeShape
    nodes: dict[str, int] = field(default_factory=dict)
    """Node name -> process group (the pid of its ``ray start --block``)."""

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.gcs_port}"

    def to_json(self) -> str:
        return json.dumps({"gcs_port": self.gcs_port, "num_cpus": self.shape.num_cpus,
                           "object_store_bytes": self.shape.object_store_bytes,
                           "nodes": self.nodes}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> RayClusterState:
        body = json.loads(text)
        return cls(int(body["gcs_port"]), NodeShape(int(body["num_cpus"]),
                                                    int(body["object_store_bytes"])),
                   {str(k): int(v) for k, v in body["nodes"].items()})


class RayCluster:
    """The local multi-node Ray cluster whose files live in ``home``."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home).resolve()

    @property
    def token_path(self) -> Path:
        return self.home / TOKEN_FILE

    def state(self) -> RayClusterState | None:
        try:
            return RayClusterState.from_json((self.home / STATE_FILE).read_text())
        except (FileNotFoundError, ValueError, KeyError):
            return None

    def address(self) -> str | None:
        state = self.state()
        return state.address if state is not None else None

    def auth_env(self) -> dict[str, str]:
        """The variables every process of this cluster (nodes and drivers) runs with."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path),
                "RAY_USAGE_STATS_ENABLED": "0"}

    # -- lifecycle ----------------------------------------------------------------------------

    def up(self, workers: int = 1, shape: NodeShape | None = None, *, gcs_port: int | None = None,
           timeout_s: float = 120) -> RayClusterState:
        """Start the head and worker nodes ``w1..wN`` that are not running (a node killed or
        stopped is started again); return once every node is alive in the GCS."""
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / "up.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self.state()
            if state is None or not _group_alive(state.nodes.get(HEAD, -1)):
                if state is not None:
                    self.down()
                state = RayClusterState(gcs_port or DEFAULT_GCS_PORT, shape or NodeShape())
                self._new_token()
            wanted = [HEAD, *(f"w{i}" for i in range(1, workers + 1))]
            try:
                for name in wanted:
                    if not _group_alive(state.nodes.get(name, -1)):
                        known = self._node_ids(name) if name != HEAD else set()
                        state.nodes[name] = self._spawn(state, name)
                        self._save(state)
                        self.wait_alive(name, timeout_s, known=known)
            except BaseException:
                if not _group_alive(state.nodes.get(HEAD, -1)):
                    self.down()
                raise
        return state

    def stop_node(self, name: str, *, kill: bool = False, timeout_s: float = 5) -> bool:
        """End node ``name``'s process group: SIGTERM then SIGKILL, or at once with ``kill``
        (a crash: the raylet and every worker on the node die without a word)."""
        state = self.state()
        pgid = state.nodes.get(name) if state is not None else None
        if pgid is None or not _group_alive(pgid):
            return False
        _end_group(pgid, 0 if kill else timeout_s)
        return True

    def down(self) -> list[str]:
        """Stop every node (workers first); return the names of those that were running."""
        state = self.state()
        if state is None:
            return []
        stopped = [n for n in sorted(state.nodes, key=lambda n: n == HEAD)
                   if self.stop_node(n)]
        for name in state.nodes:  # Ray's sessions, logs and sockets of each node
            shutil.rmtree(self._temp_dir(name), ignore_errors=True)
        (self.home / STATE_FILE).unlink(missing_ok=True)
        return stopped

    def process_groups(self) -> list[int]:
        """Every live process of the cluster's nodes."""
        state = self.state()
        return [] if state is None else [p for g in state.nodes.values()
                                         for p in group_members(g)]

    def alive_nodes(self, timeout_s: float = 10) -> dict[str, str]:
        """Node name -> Ray node id of the nodes the GCS reports alive (for a node restarted
        before the GCS noticed its death, the newest)."""
        state = self.state()
        if state is None:
            return {}
        return dict(alive_nodes(state.address, self.token_path, timeout_s))

    def node_report(self) -> dict[str, dict[str, object]]:
        """Per node: its process group, whether it runs, and its id in the GCS (None when the
        GCS does not list it alive, or does not answer)."""
        state = self.state()
        if state is None:
            return {}
        try:
            alive = self.alive_nodes(timeout_s=5)
        except Exception:  # the GCS (on the head) does not answer
            alive = {}
        return {n: {"process_group": g, "running": _group_alive(g),
                    "node_id": alive.get(n) if _group_alive(g) else None}
                for n, g in state.nodes.items()}

    def _node_ids(self, name: str) -> set[str]:
        state = self.state()
        if state is None or not _group_alive(state.nodes.get(HEAD, -1)):
            return set()
        with contextlib.suppress(Exception):
            return {i for n, i in alive_nodes(state.address, self.token_path) if n == name}
        return set()

    def wait_alive(self, name: str, timeout_s: float, *, known: set[str] | None = None) -> str:
        """Wait until the GCS reports node ``name`` alive with an id not in ``known`` (a
        restarted node's predecessor may still count as alive); return that id."""
        deadline = time.monotonic() + timeout_s
        state = self.state()
        assert state is not None
        while time.monotonic() < deadline:
            if not _group_alive(state.nodes.get(name, -1)):
                raise RayClusterError(f"ray node {name} exited during start-up; see "
                                      f"{self.home / 'nodes'}:\n{self._tail(name)}")
            with contextlib.suppress(Exception):  # the GCS may not answer yet
                fresh = self._node_ids(name) - (known or set())
                if fresh:
                    return fresh.pop()
            time.sleep(0.5)
        raise RayClusterError(f"ray node {name} not alive in the GCS at {state.address} "
                              f"within {timeout_s:.0f} s; pass a longer --timeout on a busy "
                              f"machine.\n{self._tail(name)}")

    # -- internals ----------------------------------------------------------------------------

    def _new_token(self) -> None:
        self.token_path.write_text(secrets.token_hex(32))
        self.token_path.chmod(0o600)

    def _temp_dir(self, name: str) -> Path:
        """Always the short form (``/tmp/memstack-ray-<hash of the long path>``): Ray's socket
        paths under it must stay under 107 bytes."""
        return short_temp_dir(self.home / "tmp" / name, always=True)

    def _spawn(self, state: RayClusterState, name: str) -> int:
        temp = self._temp_dir(name)
        temp.mkdir(parents=True, exist_ok=True)
        args = [f"--num-cpus={state.shape.num_cpus}", "--num-gpus=0",
                f"--object-store-memory={state.shape.object_store_bytes}",
                f"--resources={json.dumps({node_resource(name): 1})}",
                f"--temp-dir={temp}", f"--node-name={name}", "--disable-usage-stats", "--block",
                f"--dashboard-agent-listen-port={free_port()}",
                f"--dashboard-agent-grpc-port={free_port()}",
                f"--metrics-export-port={free_port()}",
                f"--runtime-env-agent-port={free_port()}"]
        if name == HEAD:
            args += ["--head", f"--node-ip-address={LOOPBACK}", f"--port={state.gcs_port}",
                     "--include-dashboard=false", f"--ray-client-server-port={free_port()}"]
        else:
            args += [f"--address={state.address}"]
        out_dir = self.home / "nodes"
        out_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.auth_env(), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
               "AUTOSCALER_METRIC_PORT": str(free_port())}  # the head's monitor: not 44217
        with (out_dir / f"{name}.out").open("ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "memstack.infra.ray.node", *args],
                                    env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, cwd=self.home,
                                    start_new_session=True)
        log.info("ray node %s: process group %d (temp dir %s)", name, proc.pid, temp)
        return proc.pid

    def _save(self, state: RayClusterState) -> None:
        tmp = self.home / (STATE_FILE + ".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.home / STATE_FILE)

    def _tail(self, name: str, lines: int = 30) -> str:
        path = self.home / "nodes" / f"{name}.out"
        if not path.is_file():
            return f"(no output in {path})"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def alive_nodes(address: str, token_path: Path, timeout_s: float = 10) -> list[tuple[str, str]]:
    """Ask the GCS at ``address`` which memstack-labelled nodes are alive: (name, node id)
    pairs, oldest first."""
    use_token(token_path)
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # Cython, no stub
    from ray.core.generated.gcs_pb2 import GcsNodeInfo  # type: ignore[attr-defined]  # protobuf

    client = GcsClient(address=address)
    infos = client.get_all_node_info(timeout=timeout_s,
                                     state_filter=GcsNodeInfo.GcsNodeState.ALIVE)
    out: list[tuple[float, str, str]] = []
    for node_id, info in infos.items():
        for resource in info.resources_total:
            if resource.startswith("memstack_node_"):
                out.append((info.start_time_ms, resource.removeprefix("memstack_node_"),
                            node_id.hex()))
    return [(name, node) for _, name, node in sorted(out)]


def use_token(token_path: Path) -> None:
    """Make this process (a driver) authenticate to a cluster with the token in
    ``token_path``: the variables, then Ray's cached configuration and token reloaded."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token_path)
    from ray._raylet import (  # type: ignore[attr-defined]  # Cython module, no stub
        AuthenticationTokenLoader,
        Config,
    )

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _group_alive(pgid: int) -> bool:
    if pgid <= 0:
        return False
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, os.WNOHANG)
    return bool(group_members(pgid))


def _end_group(pgid: int, grace_s: float) -> None:
    """SIGTERM the group and wait ``grace_s``, then SIGKILL what is left and wait for it."""
    if grace_s > 0:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(pgid):
        raise RayClusterError(f"ray process group {pgid} survived SIGKILL; check "
                              f"`ps -o pid,pgid,cmd -g {pgid}`")
