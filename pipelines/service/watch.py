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
from memstack.foundation.log_coordinates import InvalidPositionError, Position


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


class ServiceDrainingError(MemstackError):
    """The service is stopping (SIGTERM): a read waiting for ``after=`` is answered now, with
    503 and ``Retry-After``, rather than cut off when the server stops. Retry against the
    service once it is back (or another replica)."""


class AppliedWatch:
    """The stores' applied position, and a way to wait for it to cover a token."""

    def __init__(self, applied: Callable[[], Position],
                 partitions: Position | None = None) -> None:
        self._applied = applied
        self._partitions = partitions
        self._changed: asyncio.Future[None] | None = None
        self._draining = False

    def check(self, wanted: Position) -> None:
        """Raise :class:`InvalidPositionError` when ``wanted`` names a partition the topics do
        not have (such a token was never returned; waiting for it would only time out)."""
        if self._partitions is None:
            return
        unknown = sorted(self._partitions.unknown(wanted))
        if unknown:
            raise InvalidPositionError(
                f"the token names partition(s) {unknown} that the topics do not have (they "
                f"have {self._partitions.token.replace('-0', '') or 'none'}); pass the "
                "'position' a write or forget returned")

    def drain(self) -> None:
        """The service is stopping: every waiter (and every later wait) raises
        :class:`ServiceDrainingError` unless its position is already applied."""
        self._draining = True
        self.notify()

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
        self.check(wanted)
        started = time.monotonic()
        deadline = started + timeout_s
        while True:
            applied = self._applied()
            if applied.covers(wanted):
                return applied
            if self._draining:
                raise ServiceDrainingError(
                    f"the service is stopping; position {wanted.token!r} is not applied yet "
                    f"(applied {applied.token!r}). Retry the read when it is back")
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoresBehindError(wanted, applied, time.monotonic() - started)
            if self._changed is None or self._changed.done():
                self._changed = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):  # re-check at least every 0.5 s
                await asyncio.wait_for(asyncio.shield(self._changed), min(left, 0.5))
