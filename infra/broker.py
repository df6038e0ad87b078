"""A local Apache Kafka broker: one KRaft node that is both broker and controller.

The broker runs as a detached ``java ... kafka.Kafka server.properties`` process; everything it
owns lives in ``data_dir``: ``server.properties``, ``broker.pid``, ``broker.log`` (log4j2),
``broker.out`` (the JVM's own stdout/stderr), ``broker.lock`` (held while starting) and ``log/``
(the partitions and the metadata log).
Listeners bind to loopback only.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memstack.foundation.kafka_security import KafkaSecurity
from memstack.infra import jars
from memstack.infra.errors import BrokerStartError, BrokerStopError, PortInUseError
from memstack.infra.local_security import LocalSecurity
from memstack.infra.net import can_connect, port_is_free, request_metadata

log = logging.getLogger(__name__)

PID_FILE = "broker.pid"
LOCK_FILE = "broker.lock"
LOG_FILE = "broker.log"
OUT_FILE = "broker.out"
CONFIG_FILE = "server.properties"
LOG_DIRS = "log"

# Settings for one node: no replication, no waiting, no topic appears unless memstack creates it.
SINGLE_NODE_SETTINGS: dict[str, str] = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "3",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    "num.partitions": "3",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
}

FAST_START_JVM_OPTIONS: tuple[str, ...] = ("-XX:TieredStopAtLevel=1",)
"""C1 only: starts about twice as fast on a busy 2-core machine, at lower peak throughput.
For test brokers; a broker for benchmarks keeps the JVM's default (C2)."""


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap: str
    data_dir: Path
    port: int


class KafkaBroker:
    """One local KRaft broker; ``start()`` and ``stop()`` are idempotent."""

    def __init__(self, data_dir: Path, port: int, controller_port: int,
                 host: str = "127.0.0.1", *, heap: str = "512m",
                 jvm_options: Sequence[str] = (),
                 security: LocalSecurity | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.security = security
        """SASL_SSL with SCRAM and ACLs (``memstack infra up --secure``); None: PLAINTEXT."""
        self.port = port
        self.controller_port = controller_port
        self.host = host
        self.heap = heap
        self.jvm_options = tuple(jvm_options)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def resolve_jars(self) -> Path:
        return jars.resolve_jars()

    def client_security(self, role: str = "admin") -> KafkaSecurity:
        """What a client of ``role`` needs to reach this broker (PLAINTEXT when not secure)."""
        return self.security.client(role) if self.security else KafkaSecurity()

    def server_properties(self) -> dict[str, str]:
        controller = f"{self.host}:{self.controller_port}"
        secure = (self.security.server_properties(self.host, self.port, self.controller_port)
                  if self.security else {})
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{controller}",
            "listeners": f"PLAINTEXT://{self.bootstrap},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir / LOG_DIRS),
            **SINGLE_NODE_SETTINGS,
            **secure,
        }

    def is_formatted(self) -> bool:
        return (self.data_dir / LOG_DIRS / "meta.properties").is_file()

    def format(self) -> bool:
        """Write ``server.properties``; format KRaft storage unless done. True if formatted now."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        if self.is_formatted():
            return False
        cluster_id = new_cluster_id()
        scram = self.security.scram_arguments() if self.security else []
        cmd = [*self._java_cmd("kafka.tools.StorageTool", heap="256m"), "format",
               "--ignore-formatted", "-t", cluster_id, "-c", str(self.data_dir / CONFIG_FILE),
               *scram]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[-3000:]
            for secret in self._secrets():
                output = output.replace(secret, "***")
            raise BrokerStartError(
                f"formatting Kafka storage in {self.data_dir / LOG_DIRS} failed "
                f"(exit {done.returncode}); remove that folder to start afresh. Output:\n"
                + output
            )
        log.info("formatted KRaft storage in %s (cluster id %s)", self.data_dir, cluster_id)
        return True

    def start(self, timeout_s: float = 60) -> BrokerStatus:
        """Start the broker unless it runs; return once a metadata request succeeds."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with (self.data_dir / LOCK_FILE).open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one starter at a time per data dir
            if self._pid() is not None:
                self._wait_ready(timeout_s, stop_on_timeout=False)
                return self.status()
            self._check_ports()
            self.resolve_jars()
            self.format()
            started = time.monotonic()
            pid = self._spawn()
            self._wait_ready(timeout_s, stop_on_timeout=True)
        log.info("Kafka broker pid %d ready at %s in %.1f s", pid, self.bootstrap,
                 time.monotonic() - started)
        return self.status()

    def stop(self, timeout_s: float = 30) -> bool:
        """SIGTERM the broker, SIGKILL it after ``timeout_s``. False if it was not running."""
        pid = self._pid()
        if pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not _wait_exit(pid, timeout_s):
            log.warning("broker pid %d ignored SIGTERM for %.0f s; killing it", pid, timeout_s)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not _wait_exit(pid, 10):
                raise BrokerStopError(f"broker pid {pid} survived SIGKILL; check `ps -p {pid}`")
        (self.data_dir / PID_FILE).unlink(missing_ok=True)
        log.info("Kafka broker pid %d stopped", pid)
        return True

    def status(self) -> BrokerStatus:
        pid = self._pid()
        return BrokerStatus(pid is not None, pid, self.bootstrap, self.data_dir, self.port)

    def is_ready(self, timeout_s: float = 3.0) -> bool:
        """True when the broker answers a metadata request with itself unfenced."""
        return can_connect(self.host, self.port) and request_metadata(
            self.bootstrap, timeout_s, self.client_security())

    def log_tail(self, lines: int = 40) -> str:
        """The end of the broker's log (from its last ERROR, if that is earlier) and of the
        JVM's own output."""
        parts = []
        for name in (LOG_FILE, OUT_FILE):
            path = self.data_dir / name
            if path.is_file():
                parts.append(f"--- {path} ---\n" + _tail(path, lines))
        return "\n".join(parts) or f"(no log in {self.data_dir})"

    def _write_config(self) -> None:
        if self.security is not None:
            self.security.ensure()
        body = "".join(f"{k}={v}\n" for k, v in self.server_properties().items())
        path = self.data_dir / CONFIG_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # may hold a password
        with os.fdopen(fd, "w") as out:
            out.write("# written by memstack.infra.broker\n" + body)
        path.chmod(0o600)

    def _secrets(self) -> list[str]:
        if self.security is None:
            return []
        return [self.security.password_file(u).read_text().strip()
                for u in self.security.users()]

    def _java_cmd(self, main_class: str, *, heap: str) -> list[str]:
        java = jars.java_executable()
        lib = self.resolve_jars()
        return [java, f"-Xmx{heap}", "-Xms128m", "-XX:+ExitOnOutOfMemoryError",
                "-Djava.awt.headless=true", f"-Dkafka.logs.dir={self.data_dir}",
                f"-Dlog4j2.configurationFile={jars.KAFKA_DIR / 'log4j2-broker.properties'}",
                *self.jvm_options, "-cp", jars.classpath(lib), main_class]

    def _spawn(self) -> int:
        cmd = [*self._java_cmd("kafka.Kafka", heap=self.heap), str(self.data_dir / CONFIG_FILE)]
        with (self.data_dir / OUT_FILE).open("ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, cwd=self.data_dir,
                                    start_new_session=True)
        (self.data_dir / PID_FILE).write_text(f"{proc.pid}\n")
        return proc.pid

    def _wait_ready(self, timeout_s: float, *, stop_on_timeout: bool) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._pid() is None:
                raise BrokerStartError(
                    f"the Kafka broker in {self.data_dir} exited during start-up.\n"
                    + self.log_tail())
            if self.is_ready():
                return
            time.sleep(0.2)
        if stop_on_timeout:
            self.stop()
        raise BrokerStartError(
            f"the Kafka broker at {self.bootstrap} (pid file {self.data_dir / PID_FILE}) was not "
            f"ready within {timeout_s:.0f} s{' and was stopped' if stop_on_timeout else ''}; "
            "pass a longer timeout (`memstack infra up --timeout`) if the machine is busy.\n"
            + self.log_tail())

    def _check_ports(self) -> None:
        for port, variable in ((self.port, "MEMSTACK_KAFKA_PORT"),
                               (self.controller_port, "MEMSTACK_KAFKA_CONTROLLER_PORT")):
            if not port_is_free(self.host, port):
                raise PortInUseError(
                    f"port {self.host}:{port} is in use by another process, so the Kafka broker "
                    f"cannot listen there. Stop that process (`ss -ltnp 'sport = :{port}'` shows "
                    f"it) or choose another port with {variable}=<free port>.")

    def _pid(self) -> int | None:
        """The broker's pid if its pid file names a live ``kafka.Kafka`` process."""
        path = self.data_dir / PID_FILE
        try:
            pid = int(path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if _is_broker_process(pid):
            return pid
        path.unlink(missing_ok=True)
        return None


def _tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines, preceded by the latest ERROR (with context) when it is older:
    a dying broker often logs its reason and then a page of shutdown chatter."""
    text = path.read_text(errors="replace").splitlines()
    start = max(0, len(text) - lines)
    recent = range(max(0, len(text) - 20 * lines), start)
    errors = [i for i in recent if " ERROR " in text[i] or " FATAL " in text[i]]
    head = [*text[errors[-1]:min(errors[-1] + 12, start)], "..."] if errors else []
    return "\n".join(head + text[start:])


def _is_broker_process(pid: int) -> bool:
    _reap(pid)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    # An empty command line is a process between fork and exec: our broker, just spawned.
    return state != "Z" and (b"kafka.Kafka" in cmdline or cmdline == b"")


def _reap(pid: int) -> None:
    """Collect the exit status if the broker is our own child, so it leaves no zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _wait_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _is_broker_process(pid):
            return True
        time.sleep(0.1)
    return not _is_broker_process(pid)


def new_cluster_id() -> str:
    """A KRaft cluster id (URL-safe base64 of a UUID) that does not start with ``-``: the
    storage tool's argument parser reads such an id as an option ("expected one argument")."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
