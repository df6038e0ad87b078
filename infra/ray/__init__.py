"""Ray for memstack: small, local and on loopback by default; an existing cluster by config.

Local (default): ``ray.init`` with 2 CPUs, the GPUs torch sees, no dashboard, a 200 MiB object
store, its temp dir under ``<MEMSTACK_HOME>/ray`` (a short /tmp path when that one is too long
for Ray's unix sockets), usage stats off, and every port on 127.0.0.1
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` plus ``_node_ip_address``: without them Ray binds the
host's external address; see docs/consolidation.md). :func:`non_loopback_listeners` checks it.

Existing cluster: ``MEMSTACK_RAY_ADDRESS=ray://head:10001`` (Ray client) or ``auto`` / a GCS
``host:port`` when this process runs on a cluster node; the local resource options are then not
passed (the cluster has its own). ``MEMSTACK_RAY_CPUS`` / ``MEMSTACK_RAY_GPUS`` override the
local counts.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstack.foundation.errors import ConfigError
from memstack.foundation.settings import Settings
from memstack.infra.ray.paths import short_temp_dir

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
OBJECT_STORE_BYTES = 200 * 1024 * 1024
_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


@dataclass(frozen=True)
class RayConfig:
    """How memstack starts or joins Ray."""

    address: str | None = None
    num_cpus: int = 2
    num_gpus: int = 0
    object_store_bytes: int = OBJECT_STORE_BYTES
    temp_dir: Path | None = None
    token_path: Path | None = None
    """Ray's authentication token of the cluster at ``address`` (``memstack infra ray up``
    writes one per cluster); None: Ray's own lookup (``RAY_AUTH_*``, ``~/.ray``)."""

    @property
    def local(self) -> bool:
        return self.address is None

    @classmethod
    def from_settings(cls, settings: Settings) -> RayConfig:
        address = os.environ.get("MEMSTACK_RAY_ADDRESS") or None
        cpus = _env_int("MEMSTACK_RAY_CPUS", 2)
        gpus = _env_int("MEMSTACK_RAY_GPUS", detect_gpus())
        return cls(address, cpus, gpus, OBJECT_STORE_BYTES, short_temp_dir(settings.home / "ray"),
                   cluster_token(settings, address))

    def joining(self, address: str, settings: Settings) -> RayConfig:
        """This config, joining the cluster at ``address`` instead of starting Ray."""
        from dataclasses import replace

        return replace(self, address=address, token_path=cluster_token(settings, address))

    def init_kwargs(self) -> dict[str, Any]:
        """The ``ray.init`` arguments of this config."""
        common: dict[str, Any] = {"logging_level": "WARNING", "log_to_driver": False,
                                  "ignore_reinit_error": False}
        if not self.local:
            return {"address": self.address, **common}
        assert self.temp_dir is not None
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus,
                "object_store_memory": self.object_store_bytes, "include_dashboard": False,
                "_temp_dir": str(self.temp_dir), "_node_ip_address": LOOPBACK, **common}


def cluster_token(settings: Settings, address: str | None) -> Path | None:
    """The token of the local cluster (``memstack infra ray up``) when it runs at ``address``."""
    if address is None:
        return None
    from memstack.infra.ray.cluster import RayCluster

    cluster = RayCluster(settings.home / "ray-cluster")
    return cluster.token_path if cluster.address() == address else None


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    if not raw.isdigit():
        raise ConfigError(f"{name}={raw!r} must be a non-negative integer")
    return int(raw)


def detect_gpus() -> int:
    """CUDA devices torch can use here (0 without torch or CUDA)."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _loopback_only() -> None:
    """Make Ray pick 127.0.0.1 as this node's address.

    Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once, when ``ray`` is first imported; a
    process that imported ray before this module (a test, a notebook) would otherwise bind its
    ports to the host's external address, so the flag is also set on the loaded constants.
    Child processes (raylet, workers) inherit the environment.
    """
    for key, value in _ENV.items():
        os.environ.setdefault(key, value)
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] != "0"


def start_ray(config: RayConfig) -> dict[str, Any]:
    """``ray.init`` with ``config`` (environment set first); returns the cluster resources."""
    if config.local or _on_loopback(config.address):
        _loopback_only()  # a loopback address stays one (else Ray dials the external address)
    else:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if config.token_path is not None:
        from memstack.infra.ray.cluster import use_token

        use_token(config.token_path)
    import ray

    if ray.is_initialized():
        raise ConfigError("Ray is already initialised in this process; call stop_ray() first")
    if config.temp_dir is not None and config.local:
        config.temp_dir.mkdir(parents=True, exist_ok=True)
    ray.init(**config.init_kwargs())
    resources: dict[str, Any] = ray.cluster_resources()  # type: ignore[no-untyped-call]  # ray
    log.info("ray %s: %s", "local" if config.local else f"at {config.address}", resources)
    return resources


def _on_loopback(address: str | None) -> bool:
    host = (address or "").removeprefix("ray://").rsplit(":", 1)[0]
    return host in ("127.0.0.1", "localhost")


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def gpu_available() -> bool:
    """Whether the running Ray has a free GPU now (an actor then asks for ``num_gpus=1``)."""
    import ray

    free = ray.available_resources()  # type: ignore[no-untyped-call]  # ray is untyped here
    return float(free.get("GPU", 0.0)) >= 1.0


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def non_loopback_listeners(root: int | None = None) -> list[str]:
    """``ss -ltnp`` lines of this process tree (Ray's processes) listening off loopback."""
    pids = _descendants(root or os.getpid())
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    bad = []
    for line in out.splitlines():
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        local = line.split()[3] if len(line.split()) > 3 else ""
        if owners & pids and not re.match(r"^(127\.|\[::ffff:127\.|\[::1\])", local):
            bad.append(line)
    return bad
