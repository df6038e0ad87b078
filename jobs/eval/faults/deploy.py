"""The deployment the fault suite breaks: its own broker, a small disk for the stores, and
``memstack serve`` as a child process it can kill.

- **Broker**: a KRaft broker started from the jars on free loopback ports with its data under
  the run's directory (never the developer's broker: it gets killed).
- **Disk**: the stores live on a tmpfs of :data:`DISK_BYTES` mounted for the run (the suite
  runs as root here); where mounting is refused the stores stay on the ordinary disk and the
  disk-full nemesis is skipped and reported (``disk_full_skipped``).
- **Service**: ``memstack serve`` with sealed payloads, three tenants with every role, and the
  slow-consumer hook file (``pipelines/fault_hooks.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from memstack.foundation.settings import Settings
from memstack.infra.broker import FAST_START_JVM_OPTIONS, KafkaBroker
from memstack.infra.net import free_port_pair
from memstack.infra.topics import ensure_topics
from memstack.jobs.service import spawn_service
from memstack.pipelines.fault_hooks import BATCH_DELAY_VARIABLE
from memstack.pipelines.log_reader import end_offsets
from memstack.pipelines.service.position import Position

log = logging.getLogger(__name__)

TENANTS = ("t0", "t1", "t2")
DISK_BYTES = 384 * 1024 * 1024
PARTITIONS = 3


def key_of(tenant: str) -> str:
    return f"faults-key-{tenant}-0000"


@dataclass
class Deployment:
    settings: Settings
    broker: KafkaBroker
    root: Path
    stores: Path
    disk: Path | None
    """The tmpfs mount point holding ``stores`` (None: not mounted, no disk-full nemesis)."""
    service: subprocess.Popen[bytes] | None = None
    url: str = ""
    starts: int = 0
    exits: list[int] = field(default_factory=list)
    """Exit codes of service processes that ended on their own (not killed by the suite)."""

    @property
    def delay_file(self) -> Path:
        return self.root / "batch-delay"

    @property
    def log_path(self) -> Path:
        return self.root / "serve.log"

    def client(self, tenant: str, timeout_s: float = 20.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout_s,
                            headers={"Authorization": f"Bearer {key_of(tenant)}"})

    def start_service(self) -> None:
        env = {"MEMSTACK_SEAL": "1", "MEMSTACK_API_KEYS_FILE": "",
               "MEMSTACK_API_KEYS": ",".join(f"{key_of(t)}:{t}" for t in TENANTS),
               BATCH_DELAY_VARIABLE: str(self.delay_file)}
        with self.log_path.open("a") as out:
            out.write(f"\n===== start {self.starts} at {time.time():.1f} =====\n")
        self.service, self.url = spawn_service(
            self.settings, self.log_path, "--stores", str(self.stores), "--within", "0.1",
            "--after-timeout", "20", env=env, timeout_s=240)
        self.starts += 1

    def service_alive(self) -> bool:
        if self.service is None:
            return False
        code = self.service.poll()
        if code is None:
            return True
        self.exits.append(code)
        self.service = None
        return False

    def signal_service(self, sig: int) -> None:
        if self.service is not None and self.service.poll() is None:
            os.kill(self.service.pid, sig)

    def kill_service(self) -> None:
        if self.service is not None:
            with contextlib.suppress(ProcessLookupError):
                self.service.kill()
            self.service.wait(30)
            self.service = None

    def stop_service(self, timeout_s: float = 90.0) -> int | None:
        """SIGTERM (drain); SIGKILL after ``timeout_s``. The exit code, None if none ran."""
        if self.service is None:
            return None
        self.service.send_signal(signal.SIGTERM)
        try:
            code = self.service.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("the service ignored SIGTERM for %.0f s; killing it", timeout_s)
            self.service.kill()
            code = self.service.wait(30)
        self.service = None
        return code

    def ensure_service(self) -> None:
        """Start the service unless it runs (it may have stopped itself on a fault)."""
        if not self.service_alive():
            self.start_service()

    def applied(self) -> Position | None:
        try:
            answer = httpx.get(f"{self.url}/healthz", timeout=5.0)
        except httpx.HTTPError:
            return None
        if answer.status_code != 200:
            return None
        return Position.parse(answer.json().get("applied"))

    def log_end(self) -> Position:
        s = self.settings
        return Position(end_offsets(s.bootstrap, s.events_topic),
                        end_offsets(s.bootstrap, s.forget_topic))

    def wait_caught_up(self, timeout_s: float, target: Position | None = None) -> float | None:
        """Wait until the service applied ``target`` (default: the log's end now); the
        monotonic time it did, None on timeout."""
        deadline = time.monotonic() + timeout_s
        target = target if target is not None else self._end_or_none()
        while time.monotonic() < deadline:
            if target is None:
                target = self._end_or_none()
            if not self.service_alive():
                return None  # it stopped itself: catching up needs a restart first
            applied = self.applied()
            if target is not None and applied is not None and applied.covers(target):
                return time.monotonic()
            time.sleep(0.2)
        return None

    def _end_or_none(self) -> Position | None:
        try:
            return self.log_end()
        except Exception:  # the broker may be down while a fault is on
            return None

    def kill_broker(self) -> None:
        pid = self.broker.status().pid
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while self.broker.status().running and time.monotonic() < deadline:
                time.sleep(0.1)

    def restart_broker(self) -> None:
        self.broker.start(timeout_s=180)


@contextlib.contextmanager
def deployment(root: Path) -> Iterator[Deployment]:
    """A broker, a small disk and the service (not started yet); torn down at the end."""
    port, controller = free_port_pair()
    broker = KafkaBroker(root / "kafka", port, controller, jvm_options=FAST_START_JVM_OPTIONS)
    broker.start(timeout_s=180)
    disk = _mount_disk(root / "disk")
    settings = Settings(home=root / "home", kafka_port=port, controller_port=controller,
                        bootstrap=broker.bootstrap, topic_prefix="faults", partitions=PARTITIONS)
    settings.home.mkdir(parents=True, exist_ok=True)
    deployed = Deployment(settings, broker, root, (disk or root) / "stores", disk)
    try:
        ensure_topics(settings.bootstrap, settings.topic_prefix, PARTITIONS)
        yield deployed
    finally:
        deployed.kill_service()
        broker.stop()
        if disk is not None:
            _unmount(disk)


def _mount_disk(point: Path) -> Path | None:
    point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0755",
                           "tmpfs", str(point)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log.warning("could not mount a tmpfs for the stores (%s); the disk-full nemesis is "
                    "skipped", done.stderr.strip())
        return None
    return point


def _unmount(point: Path) -> None:
    done = subprocess.run(["umount", "-l", str(point)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        log.warning("could not unmount %s: %s", point, done.stderr.strip())
