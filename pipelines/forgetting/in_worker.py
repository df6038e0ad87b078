"""Forgetting inside the live worker: requests from ``<prefix>.forget`` applied as they arrive.

The worker is the only process that may write the stores, so it applies forget requests itself,
in two phases: the logical one on its store thread between two batches, the physical one in the
worker's :class:`Eraser` thread (or right after, on the store thread, without one). Logical: the
request joins the ledger (so no later batch applies an event it covers), the
:class:`ForgetProcessor` hides it on the open stores (rows deleted, keys destroyed; bounded, no
file rewritten, the stores stay open) and the projector's fact cache is dropped (its key states
could still hold forgotten entries). Physical: the stores purge the bytes, then the audit. When
the worker keeps session state, the processor forgets in it too
(:attr:`LiveForgetting.session_state`): exact removal of the forgotten events' terms, read from
the stores before they erase them, and whole sessions dropped.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from memstack.foundation.log_coordinates import advance
from memstack.operators.forget import ForgetRequest
from memstack.pipelines.forgetting.auditor import Auditor
from memstack.pipelines.forgetting.bundle import APPLIED_FILE, ForgetStores
from memstack.pipelines.forgetting.contract import Forgettable
from memstack.pipelines.forgetting.eraser import Eraser
from memstack.pipelines.forgetting.ledger import ForgetLedger, parse_request
from memstack.pipelines.forgetting.lineage import KafkaLineage, Lineage
from memstack.pipelines.forgetting.processor import ForgetOutcome, ForgetProcessor, Hidden
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.lance_index import LanceVectorIndex

log = logging.getLogger(__name__)

StateStoreFor = Callable[[ForgetStores, Lineage | None], Forgettable]


class LiveForgetting:
    """Applies ledger records to the live worker's stores (call on the store thread)."""

    def __init__(self, directory: Path, projector: StoreProjector, ledger: ForgetLedger,
                 processor_for: Callable[[ForgetStores], ForgetProcessor],
                 eraser: Eraser | None = None, lineage: KafkaLineage | None = None) -> None:
        """``lineage``: the log lineage ``processor_for`` gives every processor, kept for the
        worker's life (closed by :meth:`close`)."""
        self.directory = directory
        self.lineage = lineage
        self.projector = projector
        self.ledger = ledger
        self._processor_for = processor_for
        self.eraser = eraser
        """Erases in the background what :meth:`apply` hid; None: :meth:`apply` erases too."""
        self.on_erased: Callable[[ForgetOutcome], None] | None = None
        """Called once a request was erased and audited without an eraser (by the store
        thread, or by :attr:`auditor`)."""
        self.auditor: Auditor | None = None
        """Without an eraser: audits in the background what the store thread hid and purged
        (None: the store thread audits too)."""
        self.gate: Callable[[], AbstractContextManager[None]] | None = None
        """The service's read gate (readers wait while a forget changes the stores)."""
        self._lock = threading.Lock()
        self.next_offsets: dict[int, int] = {}
        """Per partition of the ledger, the offset after the last record handled."""
        self._hidden: set[str] = set()
        """Requests this process handed to the eraser or the auditor (a record read again is
        not hidden again; after a restart the set is empty, and unapplied requests are hidden
        again)."""
        self.session_state: StateStoreFor | None = None
        """Builds the session state's forgettable store over the stores being forgotten in and
        the processor's lineage (set by the Faust app when the worker keeps session state);
        the processor then prepares, forgets and audits it with the other stores."""

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held while the stores change for a forget: the logical phase on the store thread,
        each purge on the eraser's. One at a time (a purge's cleanup removes versions a hide
        may be reading), and readers wait at the service's gate meanwhile."""
        with self._lock, (self.gate() if self.gate is not None else nullcontext()):
            yield

    @contextmanager
    def serial(self) -> Iterator[None]:
        """One at a time with the hides and purges, without holding readers: an audit (it
        only reads, but a purge's DuckDB ``CHECKPOINT`` is skipped while it reads)."""
        with self._lock:
            yield

    def move_to(self, directory: Path) -> None:
        """Continue on the stores in ``directory`` (the service switched to them); the eraser
        erases what was hidden in the old ones there, then opens the new ones."""
        self.directory = directory

    def erasing_processor(self) -> ForgetProcessor:
        """A processor for the eraser's thread, over the writer's indexes: their locks order
        the purge's short exclusive steps with the writer's commits (DuckDB reads use
        per-thread cursors; the LanceDB purge rewrites on handles of its own)."""
        return self._processor_for(ForgetStores(self.directory, events=self._writer_events(),
                                                vectors=self._writer_vectors()))

    def _writer_events(self) -> DuckDBEventIndex:
        events = self.projector.stores.events
        if not isinstance(events, DuckDBEventIndex):
            raise TypeError(f"the live worker's event index is {type(events).__name__}; "
                            "forgetting needs the DuckDB one")
        return events

    def _writer_vectors(self) -> LanceVectorIndex:
        vectors = self.projector.stores.vectors
        if not isinstance(vectors, LanceVectorIndex):
            raise TypeError(f"the live worker's vector index is {type(vectors).__name__}; "
                            "forgetting needs the LanceDB one")
        return vectors

    def apply(self, record: LogRecord) -> Hidden | None:
        """Apply one ledger record (:meth:`apply_all` of one)."""
        return self.apply_all([record])[0]

    def apply_all(self, records: Sequence[LogRecord]) -> list[Hidden | None]:
        """Apply ledger records in log order: the requests are hidden
        (:meth:`ForgetProcessor.hide_all`: those with disjoint targets together, each group
        under :meth:`exclusive`); then, without an eraser, every request hidden here is purged in
        **one pass** of every store and audited (by :attr:`auditor`, or here without one),
        so requests arriving together cost about one purge. A record's offset counts as
        handled once this returns (its request hidden, and purged without an eraser); a
        request whose logical phase failed (a full disk) raises and leaves the positions
        where they were, so a read ``after=`` it waits instead of answering content the
        request forgets. Returns, per record, its hidden request (None: not a request, or
        applied before)."""
        if not records:
            return []
        stores = ForgetStores(self.directory, events=self._writer_events(),
                              vectors=self._writer_vectors())
        processor = self._processor_for(stores)
        if self.session_state is not None:
            processor.extra.append(self.session_state(stores, processor.lineage))
        requests = [parse_request(record) for record in records]
        fresh = self._fresh([r for r in requests if r is not None])
        hidden: list[Hidden] = []
        if fresh:
            try:
                hidden = processor.hide_all(fresh, self.exclusive)
            finally:
                with self.exclusive():
                    self.projector.reopen(self.projector.stores)  # drops the fact cache
        by_id = {h.request.request_id: h for h in hidden}
        out = [None if r is None else by_id.pop(r.request_id, None) for r in requests]
        if self.eraser is not None:
            for h in hidden:
                self._hidden.add(h.request.request_id)
                self.eraser.submit(h)
        elif hidden:
            purged = processor.purge(hidden, self.exclusive)
            if self.auditor is not None:
                self._hidden |= {h.request.request_id for h in hidden}
                self.auditor.submit(processor, purged)
            else:
                for outcome in processor.audit_purged(purged):
                    self.audited(outcome)
        for record in records:
            pos = record.position
            advance(self.next_offsets, pos.partition, pos.offset)
        return out

    def audited(self, outcome: ForgetOutcome) -> None:
        """A request erased and audited without an eraser: logged, then :attr:`on_erased`."""
        log.info("forget request %s (%s) applied: %d events erased, audit %s, %.2f s after it "
                 "was logged", outcome.request.request_id, outcome.request.scope.type,
                 outcome.events, "passed" if outcome.audit.passed else "FAILED",
                 outcome.phases.seconds_since_logged().get("audited", 0.0))
        if self.on_erased is not None:
            self.on_erased(outcome)

    def close(self, drain_s: float) -> None:
        """Stop the eraser or the auditor after they finished what waits (up to ``drain_s``),
        then close the lineage's consumer."""
        if self.eraser is not None:
            self.eraser.close(drain_s)
        if self.auditor is not None:
            self.auditor.close(drain_s)
        if self.lineage is not None:
            self.lineage.close()

    def _fresh(self, requests: Sequence[ForgetRequest]) -> list[ForgetRequest]:
        """The requests to hide, in log order: each joins the ledger; one read again while
        in hand here (a rebalance, the seek at start), applied before (a restart) or twice
        in ``requests`` is left out."""
        fresh: dict[str, ForgetRequest] = {}
        for request in requests:
            self.ledger.add(request)
            if request.request_id not in self._hidden:
                fresh.setdefault(request.request_id, request)
        with self.exclusive():  # the auditor marks applied under this lock
            done = _applied(self.directory)
        return [r for r in fresh.values() if r.request_id not in done]


def _applied(directory: Path) -> set[str]:
    path = directory / APPLIED_FILE
    return set(json.loads(path.read_text())) if path.exists() else set()


def pending_offsets(bootstrap: str, forget_topic: str, directory: Path) -> dict[int, int]:
    """Per ledger partition, the offset after the last request these stores have not applied
    (what a worker run ``--until-caught-up`` must reach); partitions with none are left out."""
    from memstack.pipelines.log_reader import read_bounded

    done = _applied(directory)
    pending: dict[int, int] = {}
    for record in read_bounded(bootstrap, forget_topic):
        request = parse_request(record)
        if request is not None and request.request_id not in done:
            advance(pending, record.position.partition, record.position.offset)
    return pending
