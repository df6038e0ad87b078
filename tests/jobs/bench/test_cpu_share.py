"""bench pipeline's CPU accounting: thread CPU from /proc, the emitter's window, the recorder."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from memstack.jobs.bench.cpu_share import (
    CpuWindow,
    EncoderCalls,
    listener_pid,
    non_encoder_share,
    pid_cpu_s,
    process_cpu_s,
    thread_cpu_s,
)
from memstack.pipelines.stores.base import Vectors


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def wait_for_cpu(native_id: int, seconds: float) -> None:
    """Until the thread has used ``seconds`` of CPU (/proc counts in ticks of 10 ms)."""
    deadline = time.monotonic() + 30
    while thread_cpu_s(native_id) < seconds:
        assert time.monotonic() < deadline, "the thread never used its CPU"
        time.sleep(0.02)


def test_a_busy_thread_is_charged_its_cpu_and_an_idle_one_nothing() -> None:
    done = threading.Event()
    busy = threading.Thread(target=lambda: (spin(0.3), done.wait(5)), name="busy")
    idle = threading.Thread(target=lambda: done.wait(5), name="idle")
    busy.start()
    idle.start()
    time.sleep(0.05)
    assert busy.native_id is not None and idle.native_id is not None
    wait_for_cpu(busy.native_id, 0.28)
    busy_cpu, idle_cpu = thread_cpu_s(busy.native_id), thread_cpu_s(idle.native_id)
    done.set()
    busy.join()
    idle.join()
    assert 0.25 <= busy_cpu <= 0.6
    assert idle_cpu < 0.05


def test_the_window_charges_the_emitting_threads_and_not_the_others() -> None:
    go, stop = threading.Event(), threading.Event()

    def work() -> None:
        go.wait(5)
        spin(0.3)
        stop.wait(5)

    emitter = threading.Thread(target=work, name="emitter-under-test-network-thread")
    other = threading.Thread(target=work, name="worker-thread")
    emitter.start()
    other.start()
    window = CpuWindow(client_id="emitter-under-test")
    window.start()
    go.set()
    spin(0.2)  # the calling thread (the bench's driver) is charged too
    for thread in (emitter, other):
        assert thread.native_id is not None
        wait_for_cpu(thread.native_id, 0.28)
    window.stop()
    stop.set()
    emitter.join()
    other.join()
    assert 0.45 <= window.client_s <= 0.75  # the driver and the emitter's thread
    assert window.process_s >= window.client_s + 0.25  # the process: every thread


def test_share_is_the_rest_over_the_encoder() -> None:
    assert non_encoder_share(12.0, 8.0) == pytest.approx(0.5)
    assert non_encoder_share(8.0, 8.0) == 0.0
    assert np.isnan(non_encoder_share(3.0, 0.0))


class CountingModel:
    name, dim = "counting", 2

    def __init__(self) -> None:
        self.texts = 0

    def encode(self, texts: Sequence[str]) -> Vectors:
        self.texts += len(texts)
        spin(0.001 * len(texts))
        return np.zeros((len(texts), 2), np.float32)


def test_the_recorder_keeps_only_calls_made_while_recording_and_replays_them() -> None:
    model = CountingModel()
    recorder = EncoderCalls(model)
    recorder.encode(["before"])
    recorder.recording = True
    recorder.encode(["a", "b"])
    recorder.encode(["c"])
    recorder.recording = False
    recorder.encode(["after"])
    assert recorder.calls == [["a", "b"], ["c"]] and recorder.texts == 3
    assert 0.002 <= recorder.busy_s < 0.5  # the two recorded calls' wall time (3 ms of spin)
    before = process_cpu_s()
    cpu = recorder.replay_cpu_s()
    assert model.texts == 2 + 3 + 3
    assert 0.0 <= cpu <= process_cpu_s() - before


def test_the_listener_of_a_port_is_found_and_charged_its_cpu() -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = ("import socket, time\n"
            f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\n"
            "end = time.process_time() + 0.3\n"
            "while time.process_time() < end: pass\n"
            "print('ready', flush=True); time.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert listener_pid(port) == child.pid
        assert pid_cpu_s(child.pid) >= 0.25
    finally:
        child.kill()
        child.wait()
    assert listener_pid(port) is None
