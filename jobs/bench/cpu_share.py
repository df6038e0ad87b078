"""Where the live worker's CPU goes: the encoder's part and the rest (``bench pipeline``).

``non_encoder_cpu_share`` = (worker CPU − encoder CPU) ÷ encoder CPU over the burst, where

- **worker CPU** is the bench process's CPU (every thread: Faust's loop, the store, encode and
  probe threads, the model's runners, Lance's and DuckDB's native threads) while the burst is
  applied, less the CPU of the threads that emit it (the driver thread and the client's
  producer threads, named by its ``client_id``): in a deployment the agents emit elsewhere;
- **encoder CPU** is what the bare model spends on exactly the encode calls the worker made
  during the burst (recorded by :class:`EncoderCalls`, replayed on a quiet process after
  the pipeline phases, same texts, same calls), so contention and waiting are counted as the
  worker's overhead, never as the encoder's.

The broker's CPU is in neither (it is another process): :func:`listener_pid` finds the process
listening on the broker's port and ``bench pipeline`` reports its CPU over the burst apart, with
the other process figures, so a reader can redo the arithmetic of docs/benchmarks.md.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from memstack.pipelines.embedding import Encoder
from memstack.pipelines.stores.base import Vectors

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def process_cpu_s() -> float:
    """User + system CPU seconds of this process, all threads."""
    times = os.times()
    return times.user + times.system


def stat_cpu_s(stat: str) -> float:
    """User + system CPU seconds in a ``/proc`` ``stat`` file (a process's or a thread's);
    FileNotFoundError once it has exited."""
    text = Path(stat).read_text()
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime


def thread_cpu_s(native_id: int) -> float:
    """User + system CPU seconds of one thread of this process (0.0 once it has exited)."""
    try:
        return stat_cpu_s(f"/proc/self/task/{native_id}/stat")
    except FileNotFoundError:
        return 0.0


def pid_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0.0 once it has exited)."""
    try:
        return stat_cpu_s(f"/proc/{pid}/stat")
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def listener_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` of this machine (None: none, or not ours to see)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                inodes.add(cols[9])
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    return int(proc.name)
        except OSError:  # exited meanwhile, or another user's
            continue
    return None


def threads_named(part: str) -> list[int]:
    """Native ids of the live Python threads whose name contains ``part``."""
    return [t.native_id for t in threading.enumerate()
            if part in t.name and t.native_id is not None]


@dataclass
class EncoderCalls:
    """The bare model, recording the texts of each call while :attr:`recording` is set."""

    inner: Encoder
    calls: list[list[str]] = field(default_factory=list)
    recording: bool = False
    busy_s: float = 0.0
    """Wall seconds spent in the recorded calls (the encoder's busy time in the burst)."""

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts: Sequence[str]) -> Vectors:
        if not self.recording:
            return self.inner.encode(texts)
        self.calls.append(list(texts))
        started = time.perf_counter()
        try:
            return self.inner.encode(texts)
        finally:
            self.busy_s += time.perf_counter() - started

    def replay_cpu_s(self) -> float:
        """Process CPU seconds of the recorded calls made again, in order, on a helper thread
        (as the worker encodes), less the process's idle CPU over the same wall time."""
        idle = _idle_cpu_per_s()

        def run() -> tuple[float, float]:
            cpu, wall = process_cpu_s(), time.perf_counter()
            for texts in self.calls:
                self.inner.encode(texts)
            return process_cpu_s() - cpu, time.perf_counter() - wall

        with ThreadPoolExecutor(1, thread_name_prefix="memstack-encode-replay") as pool:
            cpu, wall = pool.submit(run).result()
        return max(0.0, cpu - idle * wall)

    @property
    def texts(self) -> int:
        return sum(len(call) for call in self.calls)


def _idle_cpu_per_s(window_s: float = 1.0) -> float:
    """CPU seconds per second this process spends with nothing asked of it (timers, pollers)."""
    cpu, wall = process_cpu_s(), time.perf_counter()
    time.sleep(window_s)
    return (process_cpu_s() - cpu) / (time.perf_counter() - wall)


@dataclass
class CpuWindow:
    """Process CPU and the emitting threads' CPU between :meth:`start` and :meth:`stop`."""

    client_id: str
    broker_pid: int | None = None
    process_s: float = 0.0
    client_s: float = 0.0
    broker_s: float = 0.0
    _started: tuple[float, dict[int, float], float] | None = None

    def _client_threads(self) -> dict[int, float]:
        ids = threads_named(self.client_id)
        current = threading.current_thread().native_id
        if current is not None:
            ids.append(current)  # the driver thread emits
        return {i: thread_cpu_s(i) for i in ids}

    def _broker(self) -> float:
        return pid_cpu_s(self.broker_pid) if self.broker_pid is not None else 0.0

    def start(self) -> None:
        self._started = (process_cpu_s(), self._client_threads(), self._broker())

    def stop(self) -> None:
        assert self._started is not None, "CpuWindow.stop() before start()"
        process, threads, broker = self._started
        self.process_s = process_cpu_s() - process
        self.broker_s = self._broker() - broker
        now = self._client_threads()
        self.client_s = sum(max(0.0, now.get(i, before) - before)
                            for i, before in threads.items())


def non_encoder_share(worker_cpu_s: float, encoder_cpu_s: float) -> float:
    """(worker CPU − encoder CPU) ÷ encoder CPU; NaN when nothing was encoded."""
    if encoder_cpu_s <= 0:
        return float("nan")
    return (worker_cpu_s - encoder_cpu_s) / encoder_cpu_s
