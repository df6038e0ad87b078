"""The live pipeline's engine glue: batches of log records in, exactly-once store effects out.

:class:`LiveProcessor` is what the Faust agent (``memstack.pipelines.faust_app``) calls for each
batch; it knows nothing of Faust, so its logic is tested without a broker. Per batch:

1. keep, per partition, only the records that continue the stores' applied offsets (records
   before them are passed on and the projector skips them; records after a gap are held back and
   the consumer is sought back to the first missing offset);
2. ``plan = projector.prepare(records)``;
3. send ``plan.dead_letters`` to the DLQ and wait for the acknowledgements;
4. ``projector.commit(plan)`` (rows and offsets in one DuckDB transaction; LanceDB merged by id;
   the steps in order: ``memstack.pipelines.commit_path``).

The stores' applied offsets are the truth, not the consumer group's committed offsets: those
only save re-reading. A gap (a record whose offset is past the next expected one) is checked
against the log itself with :data:`Probe` before any record after it is applied, so a consumer
that resumed from a group offset ahead of the stores (stores rebuilt, restored or replaced)
never skips records.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from memstack.foundation.log_coordinates import next_offset, raise_to
from memstack.pipelines.contracts import DeadLetter, Plan, Projector
from memstack.pipelines.fault_hooks import injected_batch_delay
from memstack.pipelines.log_reader import LogRecord

log = logging.getLogger(__name__)

T = TypeVar("T")

SendDeadLetters = Callable[[list[DeadLetter]], Awaitable[None]]
"""Produce dead letters to the DLQ and return once the broker acknowledged all of them."""

Seek = Callable[[int, int], Awaitable[None]]
"""Move the consumer's position of ``partition`` to ``offset``."""

Probe = Callable[[int, int], int | None]
"""The first offset >= ``offset`` that holds a record in ``partition`` (None: none yet).
Blocking; it runs on a helper thread."""

BATCH_MAX = 512
"""Records per batch at most, by default: ``bench pipeline`` measured 213 events/s at 64 (the
encoder's batch, the earlier default) on its 5,000-event burst; see docs/benchmarks.md."""

SEEK_AHEAD_MIN = 100
"""Seek forward when a partition delivers records this far behind the applied offset."""


@dataclass(frozen=True)
class LiveConfig:
    """How the live worker batches and where it keeps its state."""

    batch_max: int = BATCH_MAX
    """Records per batch at most. Under a backlog every batch is full: the per-batch costs
    (one Lance version, one DuckDB transaction, the changelog's and the feed's round trips)
    are paid once per ``batch_max`` records. When events trickle in, ``within_s`` bounds
    the wait instead, so a large value costs no freshness."""
    within_s: float = 0.25
    """Flush a partial batch after this long: the freshness/throughput trade-off."""
    session_timeout_s: float = 6.0
    """Consumer-group session timeout; Kafka's and Faust's defaults make joins take 20-60 s."""
    heartbeat_s: float = 1.5
    commit_interval_s: float = 1.0
    """How often Faust commits acknowledged offsets to the group (a hint only; see above)."""
    progress_every_s: float = 10.0
    allow_declare_topics: bool = False
    """Let Faust create its internal topics (changelogs of tables); memstack's own topics
    always come from ``memstack infra up``."""
    group_id: str | None = None
    """The consumer group (and Faust app id); default ``<prefix>-live``. Sharded workers use
    their own (docs/scaling.md)."""
    background_erase: bool = False
    """Forget requests: True, the store thread hides each (the logical phase) and an eraser
    thread purges and audits them in batches while ingest goes on; False (the default), the
    store thread does both phases in one call. Off by default: with it on, the last clean-clone
    CI run of session 8 failed the session-state forget test once (the worker stopped
    before one of four requests was hidden, audits failed; not diagnosed). docs/forget.md."""


@dataclass(frozen=True)
class BatchTimes:
    """How long one batch took: prepare (parse, operators, DLQ) and commit (the commit path's
    steps: vectors, session state, stores, feed)."""

    prepare_s: float
    commit_s: float


@dataclass
class LiveStats:
    """Counters for progress lines; owned by the processor's event loop."""

    records: int = 0
    applied: int = 0
    dead_letters: int = 0
    batches: int = 0
    gaps: int = 0
    started: float = field(default_factory=time.monotonic)


Embed = Callable[[Plan], Plan]
"""The commit path's vectors step (:meth:`CommitPath.vectors`): ``plan`` carrying a vector for
every text it embeds. Thread-safe; the processor runs it on its own encode thread."""


class LiveProcessor:
    """Applies batches of records through a :class:`Projector`, exactly once in effect.

    **Batches in flight.** Each batch runs as a chain: prepare (store thread), dead letters,
    encode (``embed`` on the encode thread), then write (store thread: the projector's
    ``commit``, whose vectors step finds every text already encoded), after the previous
    batch's write. :meth:`process` returns before the batch is written (see there), so Faust
    delivers the next batch while this one encodes: the encoder works while the store thread
    writes the previous batch and prepares the next one.
    Prepare may run ahead of the previous batch's write: the operator state runs ahead of the
    stores by design, and a failed write drops it and stops the worker (later chains never
    write). Without ``embed`` the write encodes, and nothing overlaps.
    """

    def __init__(self, projector: Projector, send_dead_letters: SendDeadLetters, seek: Seek,
                 probe: Probe, *, embed: Embed | None = None) -> None:
        self._projector = projector
        self._send = send_dead_letters
        self._seek = seek
        self._probe = probe
        self._embed = embed
        # One thread owns the projector (DuckDB connections are not shared across threads);
        # one encodes (the model releases the GIL); one runs blocking broker look-ups so they
        # never wait behind a batch.
        self._store_thread = ThreadPoolExecutor(1, thread_name_prefix="memstack-store")
        self._encode_thread = ThreadPoolExecutor(1, thread_name_prefix="memstack-encode")
        self._io_thread = ThreadPoolExecutor(1, thread_name_prefix="memstack-probe")
        self._next: dict[int, int] = {}
        """Per partition, the next offset after the last *committed* batch."""
        self._expected: dict[int, int] = {}
        """Per partition, the next offset after the last *prepared* batch (continuity)."""
        self._probed: dict[int, tuple[int, int]] = {}
        self._sought_ahead: dict[int, int] = {}
        self._gate = asyncio.Lock()
        """Held while a batch starts (until it is prepared) and by :meth:`on_store` while it
        drains the batches in flight and runs: no store work between a prepare and its write."""
        self._in_flight: list[asyncio.Future[None]] = []
        """The chains not known to be done, oldest first; each awaits the one before it, so
        the newest ends last."""
        self._last_encoded: asyncio.Event | None = None
        """Set once the newest batch is encoded (or its chain ended early)."""
        self.failure: BaseException | None = None
        """The first batch that failed: nothing after it is written; the worker must stop."""
        self.stats = LiveStats()
        self.observers: list[Callable[[Plan, BatchTimes], None]] = []
        """Called on the loop after each committed batch with its timings (metrics)."""
        self.committed: list[Callable[[Plan], None]] = []
        """Called on the loop after each committed batch (the worker's hooks)."""
        self.on_failure: list[Callable[[BaseException], None]] = []
        """Called on the loop when a batch fails (the worker stops)."""

    async def _on_store(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._store_thread, fn, *args)

    async def on_store(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn`` on the thread that owns the stores, between batches (e.g. a forget):
        after every batch in flight has committed and before the next is prepared, never
        between a batch's prepare and its write (whose plan was made on the stores and the
        forget ledger as they were: a forget there would let the write put back what it just
        erased). Raises the failure of a batch in flight."""
        async with self._gate:
            await self.drain()
            return await self._on_store(fn, *args)

    async def drain(self) -> None:
        """Wait until every batch in flight has committed; raise the first failure."""
        if self._in_flight:
            await asyncio.shield(self._in_flight[-1])
        if self.failure is not None:
            raise self.failure

    async def load_offsets(self) -> dict[int, int]:
        """Read the applied offsets from the stores (the truth) into the processor."""
        await self.drain()
        applied = await self._on_store(self._projector.applied_offsets)
        self._next = dict(applied)
        self._expected = dict(applied)
        self._probed.clear()
        self._sought_ahead.clear()
        return dict(applied)

    def applied_offsets(self) -> dict[int, int]:
        """The next offset per partition, as of the last committed batch."""
        return dict(self._next)

    async def on_assigned(self, partitions: Sequence[int]) -> None:
        """On (re)assignment: reload the stores' offsets and seek there."""
        applied = await self.load_offsets()
        for partition in partitions:
            await self._seek(partition, applied.get(partition, 0))
        log.info("assigned partitions %s; resuming at stored offsets %s", sorted(partitions),
                 {p: applied.get(p, 0) for p in sorted(partitions)})

    async def process(self, records: Sequence[LogRecord]) -> None:
        """Start applying one batch; return once it is prepared, the batch before it has been
        encoded and the one before that has committed (:meth:`drain` waits for the rest). So
        while a batch encodes, the store thread writes the one before it and prepares the one
        after it, and the encoder finds the next batch queued. Raises the failure of an
        earlier batch."""
        if self.failure is not None:
            raise self.failure
        self.stats.records += len(records)
        kept = await self._continuous(records)
        if not kept:
            return
        delay = injected_batch_delay()
        if delay:  # a slow consumer, injected by the fault suite (pipelines/fault_hooks.py)
            await asyncio.sleep(delay)
        async with self._gate:
            started = time.perf_counter()
            plan = await self._on_store(self._projector.prepare, kept)
            for partition, next_ in plan.next_offsets.items():
                raise_to(self._expected, partition, next_)
            self._in_flight = [c for c in self._in_flight if not c.done()]
            before = self._in_flight[-1] if self._in_flight else None
            before_encoded, encoded = self._last_encoded, asyncio.Event()
            prepared = time.perf_counter() - started
            self._in_flight.append(
                asyncio.ensure_future(self._finish(plan, prepared, before, encoded)))
            self._last_encoded = encoded
        if before_encoded is not None:
            await before_encoded.wait()
        while len(self._in_flight) > 2:  # bounded, even when encoding takes no time
            await asyncio.wait([self._in_flight.pop(0)])
        if self.failure is not None:
            raise self.failure

    async def _finish(self, plan: Plan, prepare_s: float,
                      before: asyncio.Future[None] | None, encoded: asyncio.Event) -> None:
        """The rest of a batch's chain: dead letters, encode, the previous batch, write."""
        try:
            try:
                plan, encode_s = await self._encoded(plan)
            finally:
                encoded.set()
            if before is not None:
                await before
            if self.failure is not None:
                return  # an earlier batch failed: its successors never write
            writing = time.perf_counter()
            await self._on_store(self._projector.commit, plan)
            times = BatchTimes(prepare_s, encode_s + time.perf_counter() - writing)
        except asyncio.CancelledError as exc:  # the loop is shutting down: not a failure
            self.failure = self.failure or exc  # but nothing after this batch may write
            raise
        except Exception as exc:
            if self.failure is None:
                self.failure = exc
                for report in self.on_failure:
                    report(exc)
            return
        for partition, next_ in plan.next_offsets.items():
            raise_to(self._next, partition, next_)
        self.stats.applied += len(plan.events)
        self.stats.dead_letters += len(plan.dead_letters)
        self.stats.batches += 1
        for observe in self.observers:
            observe(plan, times)
        for committed in self.committed:
            committed(plan)

    async def _encoded(self, plan: Plan) -> tuple[Plan, float]:
        """Dead letters sent (and acknowledged), then ``plan`` with its vectors; the seconds
        the encoding took."""
        if plan.dead_letters:
            await self._send(plan.dead_letters)
            for letter in plan.dead_letters:
                log.warning("dead letter %s:%d@%d: %s (%s)", letter.source_topic,
                            letter.partition, letter.offset, letter.reason, letter.field)
        started = time.perf_counter()
        if self._embed is not None:
            plan = await asyncio.get_running_loop().run_in_executor(
                self._encode_thread, self._embed, plan)
        return plan, time.perf_counter() - started

    async def _continuous(self, records: Sequence[LogRecord]) -> list[LogRecord]:
        by_partition: dict[int, list[LogRecord]] = {}
        for record in records:
            by_partition.setdefault(record.position.partition, []).append(record)
        kept: list[LogRecord] = []
        for partition, recs in sorted(by_partition.items()):
            recs.sort(key=lambda r: r.position.offset)
            kept.extend(await self._continuous_run(partition, recs))
        return kept

    async def _continuous_run(self, partition: int, recs: list[LogRecord]) -> list[LogRecord]:
        """The records of one partition up to the first gap that the log does not confirm."""
        expected = self._expected.get(partition, 0)
        await self._maybe_seek_ahead(partition, recs[-1].position.offset, expected)
        kept: list[LogRecord] = []
        for record in recs:
            offset = record.position.offset
            if offset > expected and not await self._gap_is_real(partition, expected, offset):
                return kept
            kept.append(record)
            expected = max(expected, next_offset(offset))
        return kept

    async def _gap_is_real(self, partition: int, expected: int, offset: int) -> bool:
        """True when no record exists in ``[expected, offset)``; else seek back to ``expected``."""
        probed = self._probed.get(partition)
        if probed is None or probed[0] != expected:
            loop = asyncio.get_running_loop()
            true_next = await loop.run_in_executor(self._io_thread, self._probe, partition,
                                                   expected)
            if true_next is None:  # the log did not answer: hold back and read again
                await self._seek(partition, expected)
                return False
            probed = (expected, true_next)
            self._probed[partition] = probed
            if probed[1] < offset:
                self.stats.gaps += 1
                log.warning("partition %d delivered offset %d but the stores expect %d next; "
                            "seeking back to %d", partition, offset, expected, probed[1])
                await self._seek(partition, probed[1])
        return probed[1] >= offset

    async def _maybe_seek_ahead(self, partition: int, last: int, expected: int) -> None:
        if last + SEEK_AHEAD_MIN < expected and self._sought_ahead.get(partition) != expected:
            self._sought_ahead[partition] = expected
            log.info("partition %d delivers offset %d, already applied up to %d; seeking ahead",
                     partition, last, expected)
            await self._seek(partition, expected)

    def close(self) -> None:
        """Close the projector on its own thread, then stop the helper threads (a write in
        flight on the store thread finishes first)."""
        try:
            self._store_thread.submit(self._projector.close).result()
        finally:
            self._store_thread.shutdown(wait=True)
            self._encode_thread.shutdown(wait=False, cancel_futures=True)
            self._io_thread.shutdown(wait=False, cancel_futures=True)
