"""Forgetting inside the live worker: requests from ``<prefix>.forget`` applied as they arrive.

The worker is the only process that may write the stores, so it applies forget requests
itself, in two phases. On its store thread, between two batches: the request joins the ledger
(no later batch applies an event it covers), the :class:`ForgetProcessor` hides it in the open
stores (the logical phase: resolve along lineage, destroy keys, commit the deletions; no read
returns the content afterwards) and the projector's fact cache is dropped. Then a
:class:`BackgroundEraser` removes the bytes (the physical phase) and audits, while the store
thread goes on applying batches. When the worker keeps session state, the processor forgets in
it too (:attr:`LiveForgetting.session_state`), in the logical phase: exact removal of the
forgotten events' terms, read from the stores before they are deleted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from memstack.pipelines.forgetting.bundle import APPLIED_FILE, ForgetStores
from memstack.pipelines.forgetting.contract import Forgettable
from memstack.pipelines.forgetting.eraser import BackgroundEraser
from memstack.pipelines.forgetting.ledger import ForgetLedger, parse_request
from memstack.pipelines.forgetting.lineage import Lineage
from memstack.pipelines.forgetting.processor import ForgetProcessor, Hidden
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.bundle import Stores

log = logging.getLogger(__name__)

StateStoreFor = Callable[[ForgetStores, Lineage | None], Forgettable]


class LiveForgetting:
    """Applies ledger records to the live worker's stores (call :meth:`apply` on the store
    thread); the physical phase runs on a :class:`BackgroundEraser`."""

    def __init__(self, directory: Path, projector: StoreProjector, ledger: ForgetLedger,
                 processor_for: Callable[[ForgetStores], ForgetProcessor],
                 on_reopen: Callable[[Stores], None] | None = None) -> None:
        self.directory = directory
        self.projector = projector
        self.ledger = ledger
        self._processor_for = processor_for
        self._on_reopen = on_reopen
        self._eraser: BackgroundEraser | None = None
        self._hidden: set[str] = set()
        """Requests hidden by this worker (a redelivery is skipped: its audit may be pending)."""
        self.next_offsets: dict[int, int] = {}
        """Per partition of the ledger, the offset after the last record handled."""
        self.session_state: StateStoreFor | None = None
        """Builds the session state's forgettable store over the stores being forgotten in and
        the processor's lineage (set by the Faust app when the worker keeps session state);
        the processor then prepares, forgets and audits it with the other stores."""

    def apply(self, record: LogRecord) -> Hidden | None:
        pos = record.position
        try:
            return self._apply(record)
        finally:
            self.next_offsets[pos.partition] = max(self.next_offsets.get(pos.partition, 0),
                                                   pos.offset + 1)

    def _apply(self, record: LogRecord) -> Hidden | None:
        request = parse_request(record)
        if request is None:
            return None
        self.ledger.add(request)
        if request.request_id in self._hidden or request.request_id in _applied(self.directory):
            return None  # hidden already, or done before a restart
        eraser = self.eraser()
        hidden = eraser.processor.hide(request)
        self._hidden.add(request.request_id)
        self.projector.reopen(self.projector.stores)  # its fact cache may hold forgotten keys
        if self._on_reopen is not None:
            self._on_reopen(self.projector.stores)
        eraser.submit(hidden)
        log.info("forget request %s (%s) hidden: %d event(s) in %.2f s; erasing in the "
                 "background", request.request_id, request.scope.type,
                 len(hidden.resolved.targets.event_ids), sum(hidden.seconds.values()))
        return hidden

    def eraser(self) -> BackgroundEraser:
        """The processor over the worker's open stores and its eraser thread (made once)."""
        if self._eraser is None:
            processor = self._processor_for(ForgetStores.over(self.projector.stores))
            if self.session_state is not None:
                processor.extra.append(self.session_state(processor.stores,
                                                          processor.lineage))
            self._eraser = BackgroundEraser(processor)
        return self._eraser

    def idle(self) -> bool:
        """True when every request handled so far is erased and audited."""
        return self._eraser is None or self._eraser.idle()

    def close(self, timeout: float | None = None) -> None:
        """Finish the physical phase of what was hidden, then stop the eraser."""
        if self._eraser is not None:
            self._eraser.close(timeout)


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
            pos = record.position
            pending[pos.partition] = max(pending.get(pos.partition, 0), pos.offset + 1)
    return pending
