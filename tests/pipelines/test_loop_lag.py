"""The event loop's lag (pipelines/loop_lag.py): a loop held by a blocking call is seen late."""

from __future__ import annotations

import asyncio
import time

import pytest

from memstack.pipelines.loop_lag import watch_loop_lag


def test_a_blocked_loop_shows_as_lag_and_a_free_one_does_not() -> None:
    seen: list[float] = []

    async def run() -> None:
        watcher = asyncio.ensure_future(watch_loop_lag(seen.append, interval_s=0.02))
        await asyncio.sleep(0.2)  # free: wake-ups on time
        free = len(seen)
        time.sleep(0.3)  # the loop held, as a slow callback holds it
        await asyncio.sleep(0.1)
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher
        assert free >= 3
        assert max(seen[:free]) < 0.2, seen[:free]
        assert max(seen[free:]) >= 0.25, seen[free:]  # the held 0.3 s, less the interval

    asyncio.run(run())
