"""The store thread's bridge to the worker's event loop ends when the loop stops.

Regression: SIGTERM while a forget ran its session-state step left the store thread waiting
for a coroutine the stopped loop would never run, and the shutdown that joins that thread hung.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from memstack.pipelines.session_state.projector import LoopStoppedError, loop_runner


def _loop_in_thread() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return loop, thread


def test_the_result_comes_back_while_the_loop_runs() -> None:
    loop, thread = _loop_in_thread()
    try:
        async def answer() -> int:
            await asyncio.sleep(0.3)  # longer than one poll: the wait goes on while it runs
            return 42
        assert loop_runner(loop)(answer()) == 42
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_a_loop_that_stops_ends_the_wait_with_a_clear_error() -> None:
    loop, thread = _loop_in_thread()
    blocker = threading.Event()

    async def hold() -> None:  # keeps the loop busy so the next coroutine never starts
        blocker.wait(10)

    async def never() -> int:
        return 1

    asyncio.run_coroutine_threadsafe(hold(), loop)
    loop.call_soon_threadsafe(loop.stop)  # queued behind hold(): the loop stops after it
    started = time.monotonic()
    threading.Timer(0.2, blocker.set).start()
    with pytest.raises(LoopStoppedError, match="applied again when the worker restarts"):
        loop_runner(loop)(never())
    assert time.monotonic() - started < 5
    thread.join(5)
    assert not thread.is_alive()
