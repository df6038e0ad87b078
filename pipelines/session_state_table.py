"""Durable session state in the live pipeline: an in-place arena, snapshots in a changelog topic.

Per batch of logged events the :class:`SessionStateUpdater` embeds the items' texts, adds every
session's terms in one batched in-place update (:class:`StateArena`), and writes one snapshot per
touched session (:func:`snapshot_sums` bytes, fixed size) to the changelog topic, keyed
``tenant/session`` on the partition of the session's events, and waits for the broker's
acknowledgements. The changelog is compacted: the latest snapshot per session is the state, and a
tombstone (``None``) drops it. In the Faust app the changelog is a Faust table's
(:func:`define_table`), so Faust recovers it on (re)assignment; :class:`FaustTableSink` writes
through that table with explicit partitions (Faust's own ``table[key] = v`` would use the
partition of "the current event", wrong for batches that span partitions).

Exactly once in effect: every session's snapshot carries the next offset per events partition
(``marks["p<partition>"]``); events below it are skipped, so a redelivered batch adds nothing.
The snapshot is acknowledged *before* the projector commits the batch's offsets
(:class:`StatefulProjector`), so a crash never leaves the stores ahead of the state.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from kafka import KafkaProducer

from memstack.operators.log import LoggedEvent
from memstack.operators.session_state import StateConfig, _projection
from memstack.operators.state_arena import SessionSums, StateArena, Terms
from memstack.operators.state_codec import restore_sums, snapshot_sums
from memstack.operators.state_keys import ItemTexts, item_texts, project
from memstack.pipelines.contracts import Plan, Projector, WrappingProjector
from memstack.pipelines.embedding import Encoder
from memstack.schemas.events import Envelope

log = logging.getLogger(__name__)

TABLE_NAME = "session-state"
DEFAULT_CONFIG = StateConfig(dim=128)
CHANGELOG_CONFIGS = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                     "segment.ms": "60000", "delete.retention.ms": "1000",
                     "max.message.bytes": "2097152"}
"""Compacted, and tombstones go fast: a dropped session's bytes leave the log (forget)."""


def session_key(tenant: str, session: str) -> str:
    return f"{tenant}/{session}"


def key_of(event: Envelope) -> str:
    return session_key(event.tenant, event.session)


class ChangelogSink(Protocol):
    """Where snapshots go: ``send`` one keyed value (None: tombstone) to a partition; ``flush``
    returns once the broker acknowledged everything sent."""

    def send(self, partition: int, key: str, value: bytes | None) -> None: ...

    async def flush(self) -> None: ...


class SnapshotSource(Protocol):
    """The latest snapshot bytes of a session key (None: no state)."""

    def get(self, key: str) -> bytes | None: ...


@dataclass(frozen=True)
class ApplyResult:
    """What one batch did: items added, sessions written, events skipped as already applied."""

    items: int
    sessions: int
    skipped: int


class SessionStateUpdater:
    """Applies batches of logged events to the session states of one worker."""

    def __init__(self, sink: ChangelogSink, source: SnapshotSource, encoder: Encoder, *,
                 config: StateConfig = DEFAULT_CONFIG, capacity: int = 256) -> None:
        self.sink, self.source, self.encoder, self.config = sink, source, encoder, config
        self.arena = StateArena(config, capacity)
        self._lru: OrderedDict[str, None] = OrderedDict()
        self._proj = _projection(config.seed, config.dim, config.torch_dtype)

    def state(self, key: str) -> SessionSums | None:
        """The current state of ``key`` (from the arena, else its latest snapshot)."""
        slot = self.arena.slot_of(key)
        if slot is not None:
            return self.arena.cut(slot)
        data = self.source.get(key)
        return None if data is None else restore_sums(data)

    def _slot(self, key: str) -> int:
        slot = self.arena.slot_of(key)
        if slot is None:
            if len(self.arena) >= self.arena.capacity:  # evict the least recently used
                old, _ = self._lru.popitem(last=False)
                self.arena.evict(old)  # its latest snapshot is already in the changelog
            data = self.source.get(key)
            slot = (self.arena.load(key, restore_sums(data)) if data is not None
                    else self.arena.slot(key))
        self._lru[key] = None
        self._lru.move_to_end(key)
        return slot

    def warm(self, events: Sequence[LoggedEvent]) -> None:
        """Embed the items' texts now, so that a caching encoder answers ``apply`` at once."""
        items = [t for e in events if (t := item_texts_of(e)) is not None]
        if items:
            self.encoder.encode([t.key_text for t in items] + [t.value_text for t in items])

    async def apply(self, events: Sequence[LoggedEvent]) -> ApplyResult:
        """Add the events' items, write the touched sessions' snapshots, wait for the acks."""
        fresh, skipped = self._fresh(events)
        items = [(e, t) for e in fresh if (t := item_texts_of(e)) is not None]
        if items:
            texts = [t.key_text for _, t in items] + [t.value_text for _, t in items]
            vectors = torch.from_numpy(np.asarray(self.encoder.encode(texts), dtype=np.float64))
            n = len(items)
            self.arena.add(Terms(
                torch.tensor([self._slot(key_of(e.event)) for e, _ in items], dtype=torch.int64),
                torch.tensor([int(t.head) for _, t in items], dtype=torch.int64),
                project(vectors[:n], self._proj), project(vectors[n:], self._proj),
                torch.tensor([e.position.log_time.timestamp() for e, _ in items],
                             dtype=torch.float64),
                torch.ones(n, dtype=torch.float64)))
        touched: dict[str, int] = {}
        for logged in fresh:  # marks move for every event, with or without an item
            key, pos = key_of(logged.event), logged.position
            marks = self.arena.marks[self._slot(key)]
            marks[f"p{pos.partition}"] = max(marks.get(f"p{pos.partition}", 0), pos.offset + 1)
            touched[key] = pos.partition
        for key, partition in touched.items():
            self.sink.send(partition, key, snapshot_sums(self.arena.cut(self._slot(key))))
        await self.sink.flush()
        return ApplyResult(len(items), len(touched), skipped)

    def _fresh(self, events: Sequence[LoggedEvent]) -> tuple[list[LoggedEvent], int]:
        """Events not yet in their session's state (by the snapshot's offset marks)."""
        fresh: list[LoggedEvent] = []
        seen: set[tuple[int, int]] = set()
        for logged in events:
            pos = logged.position
            marks = self.arena.marks[self._slot(key_of(logged.event))]
            if pos.offset < marks.get(f"p{pos.partition}", 0) or (
                    (pos.partition, pos.offset) in seen):
                continue
            seen.add((pos.partition, pos.offset))
            fresh.append(logged)
        return fresh, len(events) - len(fresh)

    async def remove(self, events: Sequence[LoggedEvent], request_mark: tuple[int, int]) -> int:
        """Subtract exactly the terms of forgotten ``events`` (recomputed from the log/stores).

        ``request_mark`` is the forget request's ``(partition, offset)`` in the forget topic: a
        session that already applied it (or a later one of that partition) skips it, so a
        request processed twice subtracts once. Events the state never added are skipped.
        Returns the number of terms subtracted.
        """
        r_part, r_off = request_mark
        by_key: dict[str, list[LoggedEvent]] = {}
        for logged in events:
            by_key.setdefault(key_of(logged.event), []).append(logged)
        removed = 0
        for key, group in by_key.items():
            if self.arena.slot_of(key) is None and self.source.get(key) is None:
                continue
            marks = self.arena.marks[self._slot(key)]
            if r_off < marks.get(f"f{r_part}", 0):
                continue
            added = [e for e in group if e.position.offset
                     < marks.get(f"p{e.position.partition}", 0)]
            removed += self._subtract(key, added)
            marks[f"f{r_part}"] = r_off + 1
            partition = group[0].position.partition
            self.sink.send(partition, key, snapshot_sums(self.arena.cut(self._slot(key))))
        await self.sink.flush()
        return removed

    def _subtract(self, key: str, events: Sequence[LoggedEvent]) -> int:
        items = [(e, t) for e in events if (t := item_texts_of(e)) is not None]
        if not items:
            return 0
        texts = [t.key_text for _, t in items] + [t.value_text for _, t in items]
        vectors = torch.from_numpy(np.asarray(self.encoder.encode(texts), dtype=np.float64))
        n, slot = len(items), self._slot(key)
        self.arena.subtract(Terms(
            torch.full((n,), slot, dtype=torch.int64),
            torch.tensor([int(t.head) for _, t in items], dtype=torch.int64),
            project(vectors[:n], self._proj), project(vectors[n:], self._proj),
            torch.tensor([e.position.log_time.timestamp() for e, _ in items],
                         dtype=torch.float64),
            torch.ones(n, dtype=torch.float64)))
        return n

    async def drop(self, keys: Iterable[tuple[str, int]]) -> int:
        """Drop whole sessions ``(key, partition)``: out of the arena, a tombstone in the log."""
        n = 0
        for key, partition in keys:
            self.arena.evict(key)
            self._lru.pop(key, None)
            self.sink.send(partition, key, None)
            n += 1
        await self.sink.flush()
        return n


def item_texts_of(logged: LoggedEvent) -> ItemTexts | None:
    return item_texts(logged.event)


class StatefulProjector(WrappingProjector):
    """A :class:`Projector` that updates the session state before the inner one commits.

    The LiveProcessor calls ``commit`` on its store thread with exactly the events it applies
    (continuous per partition); the state's snapshots are acknowledged first, then the inner
    projector writes rows and offsets. ``run`` bridges to the event loop that owns the sink.
    """

    def __init__(self, inner: Projector, updater: SessionStateUpdater,
                 run: Callable[[Awaitable[Any]], Any]) -> None:
        super().__init__(inner)
        self.updater, self._run = updater, run

    def run(self, coro: Awaitable[Any]) -> Any:
        """Run one of the updater's coroutines on the loop that owns the sink; wait for it."""
        return self._run(coro)

    def commit(self, plan: Plan) -> None:
        if plan.events:
            self.updater.warm(plan.events)  # embed here, on the store thread, not on the loop
            result: ApplyResult = self._run(self.updater.apply(plan.events))
            log.debug("session state: %d items, %d sessions, %d skipped", result.items,
                      result.sessions, result.skipped)
        self.inner.commit(plan)


def loop_runner(loop: asyncio.AbstractEventLoop) -> Callable[[Awaitable[Any]], Any]:
    """Run a coroutine on ``loop`` from another thread and wait for its result."""
    def run(coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]  # a coroutine
    return run


# -- Kafka bindings ----------------------------------------------------------------------------


def changelog_topic(app_id: str, table_name: str = TABLE_NAME) -> str:
    """Faust's name for a table's changelog topic."""
    return f"{app_id}-{table_name}-changelog"


def ensure_changelog_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create the compacted changelog topic (as many partitions as the events topic)."""
    from memstack.infra.topics import TopicSpec, apply_topic_specs

    apply_topic_specs(bootstrap, [TopicSpec(topic, partitions, dict(CHANGELOG_CONFIGS),
                                            "session-state snapshots (Faust table changelog)")])


def define_table(app: Any, partitions: int, table_name: str = TABLE_NAME) -> Any:
    """Declare the Faust table (raw bytes keys/values) whose changelog holds the snapshots."""
    # key_type/value_type bytes make Faust pick the "raw" codec for the changelog (recovery
    # decodes with those, not with a schema's serializers).
    return app.Table(table_name, default=None, partitions=partitions, key_type=bytes,
                     value_type=bytes)


class FaustTableSink:
    """Writes through a Faust table: its local store and its changelog, explicit partitions."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self._pending: list[Any] = []

    def get(self, key: str) -> bytes | None:
        value = self.table.data.get(key.encode())
        return None if value is None else bytes(value)

    def send(self, partition: int, key: str, value: bytes | None) -> None:
        raw = key.encode()
        if value is None:
            self.table.data.pop(raw, None)
        else:
            self.table.data[raw] = value
        self._pending.append(self.table.send_changelog(partition, raw, value,
                                                       key_serializer="raw",
                                                       value_serializer="raw"))

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending:
            await asyncio.gather(*pending)


class KafkaSink:
    """The same changelog written with kafka-python (tools, tests, replays without Faust)."""

    def __init__(self, bootstrap: str, topic: str,
                 snapshots: dict[str, bytes] | None = None) -> None:
        self.topic = topic
        self.snapshots = snapshots if snapshots is not None else {}
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                       enable_idempotence=True, max_request_size=4 << 20)
        self._pending: list[Any] = []

    def get(self, key: str) -> bytes | None:
        return self.snapshots.get(key)

    def send(self, partition: int, key: str, value: bytes | None) -> None:
        if value is None:
            self.snapshots.pop(key, None)
        else:
            self.snapshots[key] = value
        self._pending.append(self._producer.send(self.topic, key=key.encode(), value=value,
                                                 partition=partition))

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        await asyncio.get_running_loop().run_in_executor(None, _wait_all, pending)

    def close(self) -> None:
        self._producer.close()


def _wait_all(futures: list[Any]) -> None:
    for future in futures:
        future.get(timeout=30)


def latest_snapshots(bootstrap: str, topic: str) -> dict[str, bytes]:
    """The changelog's state: the latest value per key, tombstoned keys left out."""
    from memstack.pipelines.log_reader import read_bounded

    latest: dict[str, bytes | None] = {}
    for record in read_bounded(bootstrap, topic):
        if record.key is not None:
            latest[record.key.decode()] = record.value
    return {k: v for k, v in latest.items() if v is not None}
