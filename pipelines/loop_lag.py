"""The event loop's lag: how late the live worker's event loop runs what is due.

The worker's event loop also runs Faust's consumer, the HTTP server of ``memstack serve`` and
its point-read lane, so while something holds the loop (or the interpreter the loop needs),
every request and every batch step waits. :func:`watch_loop_lag` sleeps :data:`INTERVAL_S`
again and again and reports how much later than due each wake-up came: the wait anything
scheduled on the loop had at that moment. ``memstack_event_loop_lag_seconds`` in ``/metrics``
(docs/operations.md; :func:`memstack.pipelines.metrics.attach` starts it with the worker). It
costs ten wake-ups a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

INTERVAL_S = 0.1
"""How often the loop's lag is sampled."""


async def watch_loop_lag(observe: Callable[[float], None], interval_s: float = INTERVAL_S,
                         clock: Callable[[], float] = time.perf_counter) -> None:
    """Forever (until cancelled): sleep ``interval_s`` on the running loop and ``observe``
    how many seconds later than due it woke."""
    while True:
        due = clock() + interval_s
        await asyncio.sleep(interval_s)
        observe(max(0.0, clock() - due))
