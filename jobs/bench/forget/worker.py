"""The stores and the live worker's store thread for ``memstack bench forget``.

:func:`write` puts the query benchmark's corpus (:class:`memstack.jobs.bench.query.Corpus`:
clustered synthetic vectors, Zipf texts) into the stores in bulk, one DuckDB record and one
LanceDB memory row per event, with canonical UUIDv7 event ids so forget requests can name them.

:class:`StoreThread` runs what the live worker runs (pipelines/live_batches.py,
pipelines/forget_agent.py): every :data:`INGEST_EVERY` s a batch of :data:`INGEST_ROWS` message
events is prepared and committed by the real :class:`StoreProjector` (index maintenance when
due); between two batches the forget records waiting (up to the forget agent's batch,
:data:`FORGET_BATCH_MAX`) are applied together by the real :class:`LiveForgetting`: hidden one
by one and purged in one pass on the store thread, then audited by the real :class:`Auditor`
thread (the worker's default), or purged and audited by the real :class:`Eraser` in its own
thread (``LiveConfig.background_erase``). What it leaves
out: Kafka (records are handed over in memory), the model (texts map to the corpus's vectors,
:class:`CorpusEncoder`), the log lineage (event-scope requests resolve from the stores), key
destruction (no sealed data) and the HTTP readers.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from queue import Empty, SimpleQueue

import numpy as np

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.jobs.bench.query import DIM, TENANTS, Corpus
from memstack.operators.forget import ForgetRequest
from memstack.operators.log import LogPosition
from memstack.operators.mutations import MemoryRow, PutRecord, RecordRow
from memstack.pipelines.forget_agent import FORGET_BATCH_MAX
from memstack.pipelines.forgetting import ForgetLedger, ForgetOutcome, ForgetProcessor
from memstack.pipelines.forgetting.auditor import Auditor
from memstack.pipelines.forgetting.bundle import ForgetStores
from memstack.pipelines.forgetting.eraser import Eraser
from memstack.pipelines.forgetting.in_worker import LiveForgetting
from memstack.pipelines.forgetting.ledger import parse_request
from memstack.pipelines.live_batches import LiveConfig
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.base import Vectors
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import ForgetScope

TOPIC = "bench"
FORGET_TOPIC = "bench.forget"
INGEST_ROWS = 50
INGEST_EVERY = 0.2
"""50 events per 0.2 s: about the live worker's pace on this machine (encoder-bound)."""
ID_MS = 1_767_225_600_000
"""The millisecond part of the generated event ids (UUIDv7, 2026-01-01)."""


SUBJECT_ROWS = 20
"""Events per subject: a subject forget covers this many rows at every store size."""


def subject_of(row: int) -> str:
    """Row ``row``'s subject: consecutive rows take turns over the tenants, so a subject spans
    :data:`SUBJECT_ROWS` rows of its tenant."""
    return f"u{row // (SUBJECT_ROWS * TENANTS)}"


def event_id(row: int) -> str:
    """Row ``row``'s event id: a canonical UUIDv7 (fixed time, the row number as its tail)."""
    return str(uuid.UUID(int=(ID_MS << 80) | (7 << 76) | (2 << 62) | row))


def record_of(row: MemoryRow) -> RecordRow:
    return RecordRow(row.event_id, row.tenant, "bench", row.session, row.subject, row.kind,
                     row.vt_from, row.vt_from, None, row.tt_from, row.partition, row.offset,
                     json.dumps({"role": "user", "text": row.text}), row.text, "bench", "agent")


def write(stores: Stores, corpus: Corpus, lo: int, hi: int) -> None:
    """Rows ``lo..hi`` of the corpus, in bulk (indexes left to the caller)."""
    rows = [replace(r, memory_id=event_id(i), event_id=event_id(i), subject=subject_of(i))
            for i, r in zip(range(lo, hi), corpus.rows(lo, hi), strict=True)]
    stores.events.apply([PutRecord(record_of(r)) for r in rows], {0: hi}, topic=TOPIC)
    stores.vectors.merge(rows, corpus.vectors[lo:hi], maintain=False)


class CorpusEncoder:
    """Texts of the corpus to their synthetic vectors (the stored vectors are synthetic)."""

    def __init__(self, corpus: Corpus, rows: Sequence[int]) -> None:
        self.corpus = corpus
        self.row_of = {corpus.text(r): r for r in rows}

    @property
    def name(self) -> str:
        return "bench-corpus"

    @property
    def dim(self) -> int:
        return DIM

    def encode(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        out: Vectors = self.corpus.vectors[[self.row_of[t] for t in texts]]
        return out


def forget_record(row: int, corpus: Corpus, offset: int) -> tuple[LogRecord, ForgetRequest]:
    """An event-scope request for ``row`` as the ledger topic holds it, logged now."""
    builder = EventBuilder(Defaults(tenant=f"t{corpus.tenant[row]}", agent="bench"))
    event = builder.forget(ForgetScope(type="event", event_id=event_id(row)), reason="bench")
    record = LogRecord(FORGET_TOPIC, None, event.to_json(),
                       LogPosition(datetime.now(UTC), 0, offset), 0)
    request = parse_request(record)
    assert request is not None
    return record, request


@dataclass
class Applied:
    """One request's phases (monotonic seconds) and outcome."""

    logged: float
    invisible: float
    erased: float
    audited: float
    outcome: ForgetOutcome


@dataclass
class StoreThread:
    """The live worker's store thread: a batch, then one pending forget record, and again."""

    directory: Path
    corpus: Corpus
    next_row: int
    encoder: CorpusEncoder
    inbox: SimpleQueue[tuple[LogRecord, float]] = field(default_factory=SimpleQueue)
    commits: list[float] = field(default_factory=list)
    applied: dict[str, Applied] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    failure: BaseException | None = None
    background_erase: bool = field(default_factory=lambda: LiveConfig().background_erase)
    """As the worker runs by default (``LiveConfig.background_erase``)."""

    def __post_init__(self) -> None:
        ledger = ForgetLedger()  # the worker's projector skips what the ledger covers
        self.projector = StoreProjector(Stores.open(self.directory), self.encoder, TOPIC,
                                        forgotten=ledger)
        self.forgetting = LiveForgetting(self.directory, self.projector, ledger,
                                         self._processor)
        self.forgetting.on_erased = self._erased
        if self.background_erase:
            self.forgetting.eraser = Eraser(self.forgetting.erasing_processor,
                                            on_erased=self._erased,
                                            exclusive=self.forgetting.exclusive)
        else:  # as the worker's forget agent sets it up
            self.forgetting.auditor = Auditor(on_audited=self.forgetting.audited,
                                              exclusive=self.forgetting.serial)
        self.builder = EventBuilder(Defaults(tenant="t0", agent="bench"))
        self.logged: dict[str, float] = {}

    def _processor(self, stores: ForgetStores) -> ForgetProcessor:
        return ForgetProcessor(stores, encoder=self.encoder,
                               outcomes_dir=self.directory.parent / "forget")

    def loop(self) -> None:
        if self.forgetting.eraser is not None:
            self.forgetting.eraser.start()
        try:
            while not self.stop.is_set():
                began = time.monotonic()
                self._ingest()
                self.commits.append(time.monotonic())
                self._apply_waiting()
                self.stop.wait(max(0.0, began + INGEST_EVERY - time.monotonic()))
        except BaseException as exc:
            self.failure = exc
        finally:
            self.forgetting.close(drain_s=0.0)
            self.projector.stores.close()

    def _ingest(self) -> None:
        hi = min(self.next_row + INGEST_ROWS, len(self.corpus.cluster))
        records = []
        for row in range(self.next_row, hi):
            tenant = f"t{self.corpus.tenant[row]}"
            event = self.builder.message(f"s{row % 1000}", "user", self.corpus.text(row),
                                         tenant=tenant, event_id=event_id(row),
                                         subject=subject_of(row))
            records.append(LogRecord(TOPIC, None, event.to_json(),
                                     LogPosition(datetime.now(UTC), 0, row), 0))
        if records:
            self.projector.commit(self.projector.prepare(records))
        self.next_row = hi

    def _apply_waiting(self) -> None:
        """The forget records waiting (up to :data:`FORGET_BATCH_MAX`) applied together, as
        the worker's forget agent takes them (:meth:`LiveForgetting.apply_all`)."""
        records: list[LogRecord] = []
        while len(records) < FORGET_BATCH_MAX:
            try:
                record, logged = self.inbox.get_nowait()
            except Empty:
                break
            request = parse_request(record)
            assert request is not None
            self.logged[request.request_id] = logged
            records.append(record)
        if records:
            assert None not in self.forgetting.apply_all(records)

    def _erased(self, outcome: ForgetOutcome) -> None:
        """The request's phases, made monotonic (called once it was erased and audited)."""
        now, wall = time.monotonic(), datetime.now(UTC)
        times = outcome.phases.times
        request_id = outcome.request.request_id

        def at(phase: str) -> float:
            return now - (wall - times[phase]).total_seconds()

        self.applied[request_id] = Applied(self.logged[request_id], at("invisible"),
                                           at("erased"), now, outcome)

    def wait(self, requests: Sequence[ForgetRequest], budget_s: float | None = None) -> bool:
        """Until every request is applied (True), or ``budget_s`` passed (False)."""
        wanted = {r.request_id for r in requests}
        deadline = None if budget_s is None else time.monotonic() + budget_s
        while not wanted <= self.applied.keys():
            if self.failure is not None:
                raise RuntimeError("the store thread failed") from self.failure
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True
