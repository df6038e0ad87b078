"""A live worker that failed exits by itself when its clean stop hangs (found by the fault
suite's disk-full nemesis: Faust's shutdown hung for minutes after a failed batch)."""

from __future__ import annotations

import threading
import time

from memstack.pipelines.faust_app import exit_unless_stopped


def test_exits_with_status_1_after_the_grace_period() -> None:
    exited: list[int] = []
    fired = threading.Event()

    def fake_exit(code: int) -> None:
        exited.append(code)
        fired.set()

    started = time.monotonic()
    timer = exit_unless_stopped(0.2, "a batch failed", exit_now=fake_exit)
    assert timer.daemon  # never keeps a process alive that is exiting anyway
    assert fired.wait(5.0)
    assert exited == [1] and time.monotonic() - started >= 0.2


def test_not_before_the_grace_period() -> None:
    exited: list[int] = []
    timer = exit_unless_stopped(30.0, "a batch failed", exit_now=exited.append)
    time.sleep(0.1)
    timer.cancel()
    assert exited == []
