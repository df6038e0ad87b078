"""``memstack serve`` as a child process, for the tests and the benchmarks."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from memstack.foundation.errors import MemstackError
from memstack.foundation.settings import Settings
from memstack.jobs.service.file import service_file


def spawn_service(settings: Settings, log_path: Path, *extra: str,
                  env: dict[str, str] | None = None,
                  timeout_s: float = 180.0) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``memstack serve --port 0 [extra]`` as a child (tests, benchmarks) and wait until
    it announced its URL in ``service.json``; its log goes to ``log_path``."""
    from memstack.jobs.run import worker_env

    path = service_file(settings)
    path.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "memstack.cli", "serve", "--port", "0", *extra]
    with log_path.open("ab") as out:
        child = subprocess.Popen(argv, env={**worker_env(settings), **(env or {})},
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise ServiceStartError(f"memstack serve exited {child.returncode}:\n"
                                    + log_path.read_text(errors="replace")[-3000:])
        if path.exists():
            return child, str(json.loads(path.read_text())["url"])
        time.sleep(0.2)
    child.kill()
    raise ServiceStartError(f"memstack serve did not announce itself in {timeout_s:.0f} s:\n"
                            + log_path.read_text(errors="replace")[-3000:])


class ServiceStartError(MemstackError):
    """``memstack serve`` did not come up; the message ends with its log."""
