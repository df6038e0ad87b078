"""Forget over HTTP: log a request, and answer its status with the per-store audit.

A request is ``logged`` once the broker acknowledged it on ``<prefix>.forget``, ``invisible``
once the worker hid it (no read returns the content), ``erased`` once the eraser removed its
bytes from every store, and ``audited`` once the audit ran (the processor writes each phase
with its time under ``$MEMSTACK_HOME/forget/<request_id>.json``: ids, counts and times only, no
forgotten content; :mod:`memstack.pipelines.forgetting.phases`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.log_coordinates import Position
from memstack.operators.forget import ForgetRequest
from memstack.pipelines.forgetting.bundle import APPLIED_FILE
from memstack.pipelines.forgetting.phases import read_status
from memstack.pipelines.service.writes import WriteRejectedError
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event

SOURCE = "memstack-http"


class Emitter(Protocol):
    def emit(self, event: Event | dict[str, Any]) -> Any: ...


class ForgetDesk:
    """Emits forget requests and answers their status."""

    def __init__(self, emitter: Emitter, stores_dir: Path, outcomes_dir: Path,
                 ledger_get: Callable[[str], ForgetRequest | None], *,
                 warning: str | None = None) -> None:
        """``warning``: what a forget cannot erase here (sealing off), sent with every answer."""
        self._emitter = emitter
        self._warnings = [] if warning is None else [warning]
        self._stores_dir = stores_dir
        self._outcomes = outcomes_dir
        self._ledger_get = ledger_get
        self._posted: dict[str, str] = {}
        self._lock = threading.Lock()

    def move_to(self, stores_dir: Path) -> None:
        """Answer statuses from other stores (the service switched to them)."""
        self._stores_dir = stores_dir

    def request(self, tenant: str, body: Any, timeout_s: float = 30.0) -> dict[str, Any]:
        """Log ``{"scope": {...}, "reason": "..."}`` for ``tenant`` (blocking); the answer has
        the request id and the position after it."""
        if not isinstance(body, dict) or not isinstance(body.get("scope"), dict):
            raise WriteRejectedError(422, "body: expected {\"scope\": {\"type\": ...}, "
                                          "\"reason\": \"...\"}")
        builder = EventBuilder(Defaults(tenant=tenant, agent=SOURCE, source=SOURCE))
        try:
            event = builder.forget(body["scope"], reason=body.get("reason"))
        except InvalidEventError as exc:
            raise WriteRejectedError(422, f"{exc.field}: {exc.rule}") from exc
        written = self._emitter.emit(event).get(timeout=timeout_s)
        position = Position.after_forgets([written])
        with self._lock:
            self._posted[event.event_id] = tenant
        return {"request_id": event.event_id, "position": position.token,
                "warnings": list(self._warnings)}

    def status(self, tenant: str, request_id: str) -> dict[str, Any] | None:
        """The request's status and audit; None when ``tenant`` has no such request."""
        request = self._ledger_get(request_id)
        with self._lock:
            posted = self._posted.get(request_id)
        owner = request.tenant if request is not None else posted
        if owner != tenant:
            return None
        record = read_status(self._outcomes, request_id)
        status = str(record.get("status", "logged")) if record is not None else "logged"
        if status == "audited" and request_id not in self._applied():
            status = "erased"  # the stores were switched or rebuilt since: not applied there
        return {"request_id": request_id, "status": status,
                "scope": request.describe() if request is not None else None,
                "phases": record.get("phases") if record is not None else None,
                "phase_seconds": record.get("phase_seconds") if record is not None else None,
                "audit": record if status == "audited" else None}

    def _applied(self) -> set[str]:
        path = self._stores_dir / APPLIED_FILE
        try:
            return set(json.loads(path.read_text()))
        except (OSError, ValueError):
            return set()
