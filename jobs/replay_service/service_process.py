"""``memstack replay-service`` as a child process: started, awaited until warm, stopped.

For the replay benchmark and the tests, which talk to the service as any client does."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstack.foundation.settings import Settings
from memstack.jobs.replay_service.client import ReplayServiceError, submit
from memstack.jobs.replay_service.request import ReplayRequest

READY_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ServiceProcess:
    proc: subprocess.Popen[str]
    url: str
    start_s: float
    """From the process's launch to its ready line (JVM, Flink, workers, model: all warm)."""
    warm_up_s: float
    log_path: Path

    @classmethod
    @contextmanager
    def start(cls, settings: Settings, work_dir: Path, parallelism: int,
              timeout_s: float = READY_TIMEOUT_S) -> Iterator[ServiceProcess]:
        """A service on a free loopback port; stopped (SIGTERM, then SIGKILL) on exit."""
        from memstack.jobs.run import worker_env

        work_dir.mkdir(parents=True, exist_ok=True)
        log_path = work_dir / "service.log"
        began = time.perf_counter()
        with log_path.open("w") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "memstack.cli", "replay-service", "--port", "0",
                 "--parallelism", str(parallelism), "--work-dir", str(work_dir)],
                env=worker_env(settings), stdout=subprocess.PIPE, stderr=log_file, text=True)
        try:
            ready = _ready_line(proc, timeout_s, log_path)
            yield cls(proc, str(ready["replay_service"]), time.perf_counter() - began,
                      float(ready["warm_up_s"]), log_path)
        finally:
            stop(proc)

    def submit(self, request: ReplayRequest) -> dict[str, Any]:
        return submit(self.url, request)


def _ready_line(proc: subprocess.Popen[str], timeout_s: float,
                log_path: Path) -> dict[str, Any]:
    got: list[str] = []
    out = proc.stdout
    assert out is not None
    reader = threading.Thread(target=lambda: got.append(out.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not got or not got[0].strip():
        tail = log_path.read_text()[-3000:] if log_path.exists() else ""
        raise ReplayServiceError(
            f"memstack replay-service did not become ready within {timeout_s:.0f} s "
            f"(exit {proc.poll()}); its log {log_path} ends:\n{tail}")
    body: dict[str, Any] = json.loads(got[0])
    return body


def stop(proc: subprocess.Popen[str]) -> int:
    """SIGTERM (the running job finishes first), then SIGKILL after ``STOP_TIMEOUT_S``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
