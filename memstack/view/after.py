"""Read your writes from Python: ``MemoryView.after(token)`` waits until the stores applied a
position a write or forget returned (see docs/service.md for the token).

The stores' applied position comes from the caller (the service passes the worker's) or, by
default, from the offsets DuckDB committed with the rows: enough for a write's token. A forget's
offsets are known only to the worker that applied it; awaiting one needs the service.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from memstack.foundation.log_coordinates import Position
from memstack.pipelines.service.watch import StoresBehindError
from memstack.view.errors import InvalidQueryError

if TYPE_CHECKING:
    from memstack.pipelines.stores.bundle import Stores

Applied = Callable[[], Position]


def stores_applied(stores: Stores, events_topic: str | None = None) -> Applied:
    """The events topic's offsets committed in the stores (topic: the settings' by default)."""
    if events_topic is None:
        from memstack.foundation.settings import Settings

        events_topic = Settings.from_env().events_topic
    topic = events_topic
    return lambda: Position(stores.events.applied_offsets(topic))


def wait_applied(applied: Applied, token: str, timeout_s: float, *,
                 knows_forgets: bool, poll_s: float = 0.02) -> Position:
    """Poll ``applied`` until it covers ``token``; :class:`StoresBehindError` on timeout."""
    wanted = Position.parse(token)
    if wanted.forgets and not knows_forgets:
        raise InvalidQueryError(
            "a forget's position can be awaited only where the worker runs: read through the "
            "service (`after=` on its HTTP API, or `memstack query --after`)")
    started = time.monotonic()
    while True:
        now = applied()
        if now.covers(wanted):
            return now
        waited = time.monotonic() - started
        if waited >= timeout_s:
            raise StoresBehindError(wanted, now, waited)
        time.sleep(poll_s)
