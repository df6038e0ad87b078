"""The replay job's Python functions, as Flink runs them in its Python workers.

Topology (see :mod:`memstack.pipelines.replay.job`)::

    Kafka (bounded)  ->  link   ->  key_by(bucket)  ->  prepare  ->  key_by(0)  ->  commit
    p = min(N, parts)    forward     record or session   p = N      one writer    p = 1

- :class:`LinkOffsets` stamps each record with the offset before it in its partition.
- :class:`PrepareStage` parses, applies the forget ledger and, when an encoder is configured,
  embeds texts in large batches on a background thread (the model sorts each batch by length,
  so padding is small), while the worker's main thread keeps receiving and emitting records:
  the parallel, CPU-heavy part.
- :class:`CommitStage` is the single writer (DuckDB allows one): it restores each partition's
  log order, then ``projector.prepare`` -> dead letters to the DLQ -> ``projector.commit``, and
  emits a :class:`Progress` after each commit.

Both keyed stages flush their last partial batch from an event-time timer at the end of time:
a bounded source ends with the maximum watermark, which fires it.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from pyflink.datastream import KeyedProcessFunction, MapFunction, RuntimeContext

from memstack.foundation.keystore import FileKeyStore, KeyStore
from memstack.foundation.log_coordinates import advance, raise_to
from memstack.foundation.sealing import Shredded, open_record
from memstack.pipelines.contracts import Plan, Projector
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.replay.ordering import PartitionLinker, Resequencer
from memstack.pipelines.replay.progress import Progress
from memstack.pipelines.replay.source import epoch_ms, to_log_record
from memstack.pipelines.replay.wiring import (
    PrepareKey,
    WriterConfig,
    close_encoder,
    embed_items,
    open_dlq_sender,
    open_encoder,
    open_projector,
    upstream_vectors,
)
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import TEXT_KINDS

log = logging.getLogger(__name__)

END_OF_TIME = 2**63 - 2
"""Timer timestamp that only the final watermark (Long.MAX_VALUE) reaches."""


@dataclass(frozen=True)
class Item:
    """A record on its way to the writer."""

    record: LogRecord
    prev: int
    forgotten: bool = False
    text: str | None = None
    """The event's text, parsed by the prepare stage (None: nothing to embed)."""
    vector: bytes | None = None
    """float32 bytes of the embedding of ``text``, computed by the prepare stage."""
    read_at: float = 0.0
    """Wall clock (epoch s) when the source side saw the record: rates include every stage."""
    ready_at: float = 0.0
    """Wall clock (epoch s) when the prepare subtask that handled the record was ready (model
    loaded): processing rates start at the latest of these, start-up is reported apart."""


def session_bucket(key: bytes | None, buckets: int) -> int:
    """A stable bucket of the Kafka key (tenant/session): one session, one bucket."""
    return zlib.crc32(key or b"") % buckets


def record_bucket(partition: int, offset: int, buckets: int) -> int:
    """Consecutive records of a partition in consecutive buckets: even load on every subtask."""
    return (offset + 7919 * partition) % buckets


class LinkOffsets(MapFunction):  # type: ignore[misc]  # PyFlink is untyped
    """Source side, forward-connected: adds the previous offset of the record's partition."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.linker = PartitionLinker()

    def map(self, value: Any) -> Item:
        k, v, p, o, ts, tstype = value[0], value[1], value[2], value[3], value[4], value[5]
        record = to_log_record(self.topic, k, v, p, o, epoch_ms(ts), tstype)
        return Item(record, self.linker.link(p, o), read_at=time.time())


class PrepareStage(KeyedProcessFunction):  # type: ignore[misc]
    """Parallel: forget filter and batched embedding; per-session order is kept (keyed).

    Full batches go to one background thread (torch releases the GIL), so receiving the next
    batch and emitting the last overlap the model; batches are emitted in the order they were
    cut, which keeps every session's order.
    """

    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.buffer: list[Item] = []
        self.timed: set[int] = set()
        self.encoder: Any = None
        self.pool: ThreadPoolExecutor | None = None
        self.inflight: deque[Future[list[Item]]] = deque()
        self.ready_at = 0.0
        self.keys: KeyStore | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        if self.config.keys_dir is not None:  # sealed records are opened here too, to embed
            self.keys = FileKeyStore(self.config.keys_dir)
        if self.config.embed_upstream:
            self.encoder = open_encoder(self.config)
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-embed")
        self.ready_at = time.time()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        if self.encoder is not None:
            close_encoder(self.config, self.encoder)
            self.encoder = None

    def process_element(self, value: Item, ctx: Any) -> Iterator[Item]:
        key = ctx.get_current_key()
        if key not in self.timed:
            self.timed.add(key)
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        self.buffer.append(self._prepared(value))
        if len(self.buffer) >= self.config.embed_batch:
            self._cut()
        yield from self._done(wait=len(self.inflight) > 1)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Item]:
        self._cut()
        while self.inflight:
            yield from self._done(wait=True)

    def _prepared(self, item: Item) -> Item:
        """Parse once: whether the forget ledger covers the event, and the text to embed."""
        if item.record.value is None:
            return replace(item, ready_at=self.ready_at)
        try:
            event = open_record(item.record.value, self.keys)
        except InvalidEventError:
            return replace(item, ready_at=self.ready_at)  # the projector makes a dead letter
        if isinstance(event, Shredded):
            return replace(item, ready_at=self.ready_at)  # the projector skips it
        forget = self.config.forget
        covered = forget is not None and forget.covers(event, item.record.position.log_time)
        # Only kinds that become memory rows are embedded: a fact's text ("subject relation
        # object") is never searched by vector, so embedding it would be work for nothing.
        text = event.text() if event.kind in TEXT_KINDS else None
        return replace(item, ready_at=self.ready_at, forgotten=covered,
                       text=text if text and text.strip() else None)

    def _cut(self) -> None:
        """Hand the buffered items to the embedding thread (or straight through)."""
        items, self.buffer = self.buffer, []
        if not items:
            return
        if self.pool is not None:
            self.inflight.append(self.pool.submit(embed_items, self.encoder, items))
            return
        done: Future[list[Item]] = Future()
        done.set_result(items)
        self.inflight.append(done)

    def _done(self, *, wait: bool) -> Iterator[Item]:
        """Emit finished batches in order; with ``wait``, block on the oldest first."""
        while self.inflight and (wait or self.inflight[0].done()):
            yield from self.inflight.popleft().result()
            wait = False


@dataclass
class _Counters:
    applied: int = 0
    forgotten: int = 0
    dead_letters: int = 0
    batches: int = 0
    first_at: float = 0.0
    ready_at: float = 0.0
    positions: dict[int, int] = field(default_factory=dict)


class CommitStage(KeyedProcessFunction):  # type: ignore[misc]
    """The single writer: per-partition log order, then prepare -> DLQ -> commit."""

    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.projector: Projector | None = None
        self.send_dlq: Any = None
        self.order: Resequencer[Item] = Resequencer()
        self.batch: list[Item] = []
        self.counters = _Counters()
        self.timed = False

    def open(self, runtime_context: RuntimeContext) -> None:
        self.projector = open_projector(self.config)
        self.counters.positions = dict(self.projector.applied_offsets())
        self.send_dlq = open_dlq_sender(self.config)

    def close(self) -> None:
        if self.projector is not None:
            self.projector.close()
        if self.send_dlq is not None:
            self.send_dlq.close()

    def process_element(self, value: Item, ctx: Any) -> Iterator[str]:
        c = self.counters
        c.first_at = value.read_at if c.first_at == 0.0 else min(c.first_at, value.read_at)
        c.ready_at = max(c.ready_at, value.ready_at)
        if not self.timed:
            self.timed = True
            ctx.timer_service().register_event_time_timer(END_OF_TIME)
        r = value.record
        self.batch.extend(self.order.push(r.position.partition, value.prev, r.position.offset,
                                          value))
        if len(self.batch) >= self.config.commit_batch:
            yield self._commit().to_json()

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[str]:
        if self.order.pending():
            log.error("replay writer: %d records never got their predecessor",
                      self.order.pending())
        yield replace(self._commit(), final=True).to_json()

    def _commit(self) -> Progress:
        items, self.batch = self.batch, []
        c = self.counters
        if items:
            assert self.projector is not None
            plan = self._plan(items)
            if plan.dead_letters:
                self.send_dlq.send(plan.dead_letters)
            self.projector.commit(plan)
            c.applied += len(plan.events)
            c.dead_letters += len(plan.dead_letters)
            c.batches += 1
            for p, o in plan.next_offsets.items():
                raise_to(c.positions, p, o)
        return Progress(dict(c.positions), c.applied, c.forgotten, c.dead_letters, c.batches,
                        first_at=max(c.first_at, c.ready_at), at=time.time())

    def _plan(self, items: list[Item]) -> Plan:
        assert self.projector is not None
        kept = [i for i in items if not i.forgotten]
        self.counters.forgotten += len(items) - len(kept)
        plan = self.projector.prepare([i.record for i in kept])
        offsets = dict(plan.next_offsets)
        for i in items:  # forgotten records still move the offsets past them
            advance(offsets, i.record.position.partition, i.record.position.offset)
        vectors = upstream_vectors(kept) if self.config.embed_upstream else {}
        return replace(plan, next_offsets=offsets, vectors=vectors)


class BucketKey:
    """Key selector of the prepare stage: a bucket of the record (even load, the default) or of
    its session (a session's records stay on one subtask, in order).

    The writer restores each partition's log order either way, and that order holds every
    session's order, so ``record`` loses nothing; it exists because sessions are uneven: on
    the replay bench's 300 sessions, keying by session gave one of two subtasks 16% more
    records, and the job waited for it.
    """

    def __init__(self, buckets: int, by: PrepareKey = "record") -> None:
        self.buckets = buckets
        self.by = by

    def __call__(self, item: Item) -> int:
        if self.by == "session":
            return session_bucket(item.record.key, self.buckets)
        pos = item.record.position
        return record_bucket(pos.partition, pos.offset, self.buckets)


def single_writer_key(item: Item) -> int:
    """Every record goes to the one writer."""
    return 0
