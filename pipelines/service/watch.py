"""Read your writes: wait until the stores' applied position covers a token.

The live worker calls :meth:`AppliedWatch.notify` on its loop after each committed batch and
after each applied forget; ``after=`` reads await :meth:`AppliedWatch.wait` on the same loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from memstack.foundation.errors import MemstackError
from memstack.pipelines.service.position import Position


class StoresBehindError(MemstackError):
    """The stores did not apply a position within the timeout; the message says how far behind
    they are (records per partition). Retry later or with a longer timeout."""

    def __init__(self, wanted: Position, applied: Position, waited_s: float) -> None:
        self.behind = applied.behind(wanted)
        self.applied = applied
        super().__init__(
            f"the stores have not applied position {wanted.token!r} after {waited_s:.1f} s: "
            f"{sum(self.behind.values())} record(s) behind ({self.behind}); applied now "
            f"{applied.token!r}. Retry the read, or raise the timeout")


class AppliedWatch:
    """The stores' applied position, and a way to wait for it to cover a token."""

    def __init__(self, applied: Callable[[], Position]) -> None:
        self._applied = applied
        self._changed: asyncio.Future[None] | None = None

    def applied(self) -> Position:
        return self._applied()

    def notify(self) -> None:
        """Wake the waiters (call on the loop after the applied position moved)."""
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        self._changed = None

    async def wait(self, wanted: Position, timeout_s: float) -> Position:
        """Return the applied position once it covers ``wanted``; raise
        :class:`StoresBehindError` after ``timeout_s``."""
        started = time.monotonic()
        deadline = started + timeout_s
        while True:
            applied = self._applied()
            if applied.covers(wanted):
                return applied
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoresBehindError(wanted, applied, time.monotonic() - started)
            if self._changed is None or self._changed.done():
                self._changed = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):  # re-check at least every 0.5 s
                await asyncio.wait_for(asyncio.shield(self._changed), min(left, 0.5))
