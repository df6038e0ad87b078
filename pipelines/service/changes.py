"""The change feed: what each commit changed, published in-process, followed over SSE.

After a batch commits, the worker turns the batch's mutations into changes (a record added, a
fact version opened or closed) and after a forget is applied, one ``forgotten`` change; the feed
keeps the most recent ones in memory with the applied position after their commit. A follower
asks for the changes of one tenant after a position (``from=``) and then waits for new ones.
Changes before the service started, or older than the feed keeps, are not replayed: the query
API has the state, the feed has what happens next (HTTP 410 names the oldest position kept).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from memstack.foundation.errors import MemstackError
from memstack.foundation.log_coordinates import Position
from memstack.operators.mutations import Mutation, PutFactVersion, PutRecord

DEFAULT_CAPACITY = 20_000
HEARTBEAT_S = 15.0


class FeedGoneError(MemstackError):
    """The asked ``from`` position is older than the oldest change the feed keeps."""


@dataclass(frozen=True)
class Change:
    """One committed change of one tenant, with the applied position after its commit."""

    seq: int
    tenant: str
    type: str
    data: dict[str, Any]
    position: Position

    def sse(self) -> str:
        body = json.dumps({"type": self.type, "tenant": self.tenant,
                           "position": self.position.token, **self.data},
                          ensure_ascii=False, default=str)
        return f"id: {self.position.token}\nevent: {self.type}\ndata: {body}\n\n"


def changes_of(mutations: Iterable[Mutation]) -> list[tuple[str, str, dict[str, Any]]]:
    """``(tenant, type, data)`` for the mutations a follower cares about, in commit order."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for m in mutations:
        if isinstance(m, PutRecord):
            r = m.row
            out.append((r.tenant, "memory_added", {
                "event_id": r.event_id, "kind": r.kind, "session": r.session,
                "subject": r.subject, "text": r.text, "partition": r.partition,
                "offset": r.offset}))
        elif isinstance(m, PutFactVersion):
            v = m.row
            out.append((v.tenant, "fact_version_closed" if v.tt_to is not None
                        else "fact_version_opened", {
                "version_id": v.version_id, "subject": v.subject, "relation": v.relation,
                "object": v.object, "vt_from": v.vt_from, "vt_to": v.vt_to,
                "tt_from": v.tt_from, "tt_to": v.tt_to, "source_event_id": v.source_event_id,
                "closed_by_event_id": v.closed_by_event_id}))
    return out


class ChangeFeed:
    """A bounded in-memory log of changes; publish on the loop, follow with :meth:`follow`."""

    def __init__(self, start: Position, capacity: int = DEFAULT_CAPACITY) -> None:
        self._kept: deque[Change] = deque(maxlen=capacity)
        self._floor = start
        self._seq = 0
        self._new: asyncio.Event | None = None

    @property
    def floor(self) -> Position:
        """The position before the oldest change kept."""
        return self._floor

    def publish(self, changes: Sequence[tuple[str, str, dict[str, Any]]],
                position: Position) -> None:
        for tenant, kind, data in changes:
            if len(self._kept) == self._kept.maxlen:
                self._floor = self._floor.merge(self._kept[0].position)
            self._seq += 1
            self._kept.append(Change(self._seq, tenant, kind, data, position))
        if changes and self._new is not None:
            self._new.set()
            self._new = None

    def check_from(self, since: Position) -> None:
        """Raise :class:`FeedGoneError` when ``since`` is older than the feed keeps."""
        old = {f"e{p}": o for p, o in since.events.items() if o < self._floor.events.get(p, 0)}
        old |= {f"f{p}": o for p, o in since.forgets.items()
                if o < self._floor.forgets.get(p, 0)}
        if old:
            raise FeedGoneError(
                f"from={since.token!r} is older than the oldest change kept (position "
                f"{self._floor.token!r}; partitions {sorted(old)}): read the current state "
                f"with the query API, then follow from={self._floor.token}")

    def _after(self, tenant: str, since: Position | None, seq: int) -> list[Change]:
        return [c for c in self._kept if c.seq > seq and c.tenant == tenant
                and (since is None or c.position.after(since))]

    async def follow(self, tenant: str, since: Position | None,
                     heartbeat_s: float = HEARTBEAT_S) -> AsyncIterator[str]:
        """SSE text: the tenant's changes after ``since`` (None: from now on), then new ones
        as they commit; a comment line every ``heartbeat_s`` keeps proxies from closing."""
        seq = 0 if since is not None else self._seq
        while True:
            published = self._seq
            for change in self._after(tenant, since, seq):
                yield change.sse()
            seq = published
            if self._seq > seq:
                continue  # published while the changes above were being sent
            if self._new is None:
                self._new = asyncio.Event()
            try:
                await asyncio.wait_for(self._new.wait(), heartbeat_s)
            except TimeoutError:
                yield ": keep-alive\n\n"
