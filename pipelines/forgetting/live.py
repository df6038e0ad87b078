"""Forgetting inside the live worker: requests from ``<prefix>.forget`` applied as they arrive.

The worker is the only process that may write the stores, so it applies forget requests
itself, on its store thread, between two batches: the request joins the ledger (so no later
batch applies an event it covers), the projector's stores are closed, the
:class:`ForgetProcessor` erases along lineage and compacts the files, destroys the keys, audits,
and the stores are opened again with the projector's fact cache dropped (its key states could
still hold forgotten entries). When the worker keeps session state, the processor forgets in it
too (:attr:`LiveForgetting.session_state`): exact removal of the forgotten events' terms, read
from the stores before they erase them, and whole sessions dropped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from memstack.pipelines.forgetting.bundle import APPLIED_FILE, ForgetStores
from memstack.pipelines.forgetting.contract import Forgettable
from memstack.pipelines.forgetting.ledger import ForgetLedger, parse_request
from memstack.pipelines.forgetting.lineage import Lineage
from memstack.pipelines.forgetting.processor import ForgetOutcome, ForgetProcessor
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.bundle import Stores

log = logging.getLogger(__name__)

StateStoreFor = Callable[[ForgetStores, Lineage | None], Forgettable]


class LiveForgetting:
    """Applies ledger records to the live worker's stores (call on the store thread)."""

    def __init__(self, directory: Path, projector: StoreProjector, ledger: ForgetLedger,
                 processor_for: Callable[[ForgetStores], ForgetProcessor],
                 on_reopen: Callable[[Stores], None] | None = None) -> None:
        self.directory = directory
        self.projector = projector
        self.ledger = ledger
        self._processor_for = processor_for
        self._on_reopen = on_reopen
        self.next_offsets: dict[int, int] = {}
        """Per partition of the ledger, the offset after the last record handled."""
        self.session_state: StateStoreFor | None = None
        """Builds the session state's forgettable store over the stores being forgotten in and
        the processor's lineage (set by the Faust app when the worker keeps session state);
        the processor then prepares, forgets and audits it with the other stores."""

    def apply(self, record: LogRecord) -> ForgetOutcome | None:
        """Apply one ledger record. Its offset counts as handled only once it was applied: a
        request whose erasure failed (a full disk) leaves the position where it was, so a read
        ``after=`` it waits instead of answering content the request forgets."""
        outcome = self._apply(record)
        pos = record.position
        self.next_offsets[pos.partition] = max(self.next_offsets.get(pos.partition, 0),
                                               pos.offset + 1)
        return outcome

    def _apply(self, record: LogRecord) -> ForgetOutcome | None:
        request = parse_request(record)
        if request is None:
            return None
        self.ledger.add(request)
        if request.request_id in _applied(self.directory):
            return None  # done before a restart: the stores already hold the result
        self.projector.stores.close()
        try:
            with ForgetStores(self.directory) as stores:
                processor = self._processor_for(stores)
                if self.session_state is not None:
                    processor.extra.append(self.session_state(stores, processor.lineage))
                outcome = processor.apply(request)
        finally:
            reopened = Stores.open(self.directory)
            self.projector.reopen(reopened)
            if self._on_reopen is not None:
                self._on_reopen(reopened)
        log.info("forget request %s (%s) applied: %d events erased, audit %s in %.2f s",
                 request.request_id, request.scope.type, outcome.events,
                 "passed" if outcome.audit.passed else "FAILED", sum(outcome.seconds.values()))
        return outcome



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
