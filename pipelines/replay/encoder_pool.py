"""Loaded encoders kept by the process between replay jobs.

A Python worker of the replay loads the model when its prepare stage opens. In a process that
runs job after job with loopback workers (the warm replay service,
:mod:`memstack.jobs.replay_service`), the stages of every job run in that process: a stage
that closes gives its encoder back here, and the next job's stage of the same encoder kind
and thread count takes it instead of loading the model again. An encoder is lent to one
stage at a time (two parallel stages hold two), so no model object is shared by two threads.
A worker process that runs one job and exits keeps nothing.
"""

from __future__ import annotations

import threading

from memstack.pipelines.embedding import Encoder, LoadableEncoder, make_encoder

_idle: dict[tuple[str, int], list[Encoder]] = {}
_lock = threading.Lock()


def lend(kind: str, threads: int) -> Encoder:
    """A loaded encoder of ``kind`` with ``threads`` threads: an idle one, else a new one."""
    with _lock:
        idle = _idle.get((kind, threads))
        if idle:
            return idle.pop()
    fresh: LoadableEncoder = make_encoder(kind, threads=threads)
    return fresh.load()


def give_back(kind: str, threads: int, encoder: Encoder) -> None:
    """Keep ``encoder`` for the next stage that asks for the same kind and threads."""
    with _lock:
        _idle.setdefault((kind, threads), []).append(encoder)


def preload(kind: str, threads: int, count: int = 1) -> None:
    """Load ``count`` encoders ahead of the first job (the warm service's start)."""
    loaded = [lend(kind, threads) for _ in range(count)]
    for encoder in loaded:
        give_back(kind, threads, encoder)


def idle_count(kind: str, threads: int) -> int:
    with _lock:
        return len(_idle.get((kind, threads), []))
