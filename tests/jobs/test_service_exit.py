"""A service that returned ends its process: a thread left behind cannot keep it alive, and
SIGTERM works again (the hostile test's second service logged "service stopped", never
exited and ignored SIGTERM)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

LEFT_BEHIND = """
import threading, time
from memstack.jobs.service import exit_after
threading.Thread(target=time.sleep, args=(600,)).start()   # not a daemon
exit_after(3, grace_s={grace})
print("returned", flush=True)
"""


def test_a_thread_left_behind_does_not_keep_the_process() -> None:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", LEFT_BEHIND.format(grace=0.5)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3, done.stderr
    assert "threads still running" in done.stderr
    assert time.monotonic() - started < 30


def test_sigterm_ends_it_at_once_after_the_service_returned() -> None:
    child = subprocess.Popen([sys.executable, "-c", LEFT_BEHIND.format(grace=60)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "returned"
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=10) == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()
