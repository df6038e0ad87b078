"""Forgetting inside the live worker: requests from ``<prefix>.forget`` applied as they arrive.

The worker is the only process that may write the stores, so it applies forget requests
itself, on its store thread, between two batches: the request joins the ledger (so no later
batch applies an event it covers), the projector's stores are closed, the
:class:`ForgetProcessor` erases along lineage and compacts the files, destroys the keys, audits,
and the stores are opened again with the projector's fact cache dropped (its key states could
still hold forgotten entries).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from memstack.operators.forget import ForgetRequest
from memstack.pipelines.forgetting.bundle import APPLIED_FILE, ForgetStores
from memstack.pipelines.forgetting.ledger import ForgetLedger, parse_request
from memstack.pipelines.forgetting.processor import ForgetOutcome, ForgetProcessor
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.bundle import Stores

log = logging.getLogger(__name__)


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
        self.on_sessions_forgotten: Callable[[list[tuple[str, int]]], object] | None = None
        """Called with ``(tenant/session, partition)`` of every session a request erased whole
        (session and tenant scopes), e.g. to drop their recurrent state."""

    def apply(self, record: LogRecord) -> ForgetOutcome | None:
        pos = record.position
        try:
            return self._apply(record)
        finally:
            self.next_offsets[pos.partition] = max(self.next_offsets.get(pos.partition, 0),
                                                   pos.offset + 1)

    def _apply(self, record: LogRecord) -> ForgetOutcome | None:
        request = parse_request(record)
        if request is None:
            return None
        self.ledger.add(request)
        if request.request_id in _applied(self.directory):
            return None  # done before a restart: the stores already hold the result
        sessions = self._whole_sessions(request)
        self.projector.stores.close()
        try:
            with ForgetStores(self.directory) as stores:
                outcome = self._processor_for(stores).apply(request)
        finally:
            reopened = Stores.open(self.directory)
            self.projector.reopen(reopened)
            if self._on_reopen is not None:
                self._on_reopen(reopened)
        if sessions and self.on_sessions_forgotten is not None:
            self.on_sessions_forgotten(sessions)
        log.info("forget request %s (%s) applied: %d events erased, audit %s in %.2f s",
                 request.request_id, request.scope.type, outcome.events,
                 "passed" if outcome.audit.passed else "FAILED", sum(outcome.seconds.values()))
        return outcome


    def _whole_sessions(self, request: ForgetRequest) -> list[tuple[str, int]]:
        """The sessions a session or tenant request erases, with their events' partition."""
        scope = request.scope
        if scope.type not in ("session", "tenant"):
            return []
        rows = self.projector.stores.events.records(
            request.tenant, session=scope.session if scope.type == "session" else None)
        return sorted({(f"{r.tenant}/{r.session}", r.partition) for r in rows})


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
