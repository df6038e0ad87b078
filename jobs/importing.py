"""``memstack import``: events from a file back into a deployment, idempotent by event id.

Two routes:

- **Kafka** (default): the deployment's event ids are read from ``<prefix>.events`` first (the
  envelope is in the clear, sealed or not) and every event already there is skipped; the rest
  are produced in file order with the idempotent ``acks=all`` producer (sealed unless
  ``MEMSTACK_SEAL=0``). A second import of the same file sends nothing, so no store (records,
  facts, vectors, session state, consolidation feed) sees an event twice.
- **The service** (``--url``): batches posted to ``POST /v1/tenants/{t}/events``; the service
  answers a retried id with its first write (docs/service.md, with its limits).

The whole file is validated before anything is sent; forget requests are refused (file them
with ``memstack forget``). docs/export.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memstack.foundation.settings import Settings
from memstack.jobs.progress_line import ProgressLine
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event, EventKind, parse_event

log = logging.getLogger(__name__)

SERVICE_BATCH = 500


@dataclass
class ImportResult:
    read: int = 0
    sent: int = 0
    already_there: int = 0
    """Events whose id the deployment's log (or this file, earlier) already holds."""

    def summary(self) -> str:
        return json.dumps({"read": self.read, "sent": self.sent,
                           "already_there": self.already_there})


def load_events(path: Path, tenant: str | None = None) -> tuple[list[Event], list[str]]:
    """Every line of a JSONL export as an event (re-tenanted when ``tenant`` is given)."""
    events: list[Event] = []
    errors: list[str] = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                event = parse_event(line.encode())
            except InvalidEventError as exc:
                errors.append(f"line {number}: {exc}")
                continue
            if event.kind is EventKind.FORGET_REQUESTED:
                errors.append(f"line {number}: a forget request; file it with `memstack forget`")
                continue
            events.append(event if tenant is None else event.model_copy(update={"tenant": tenant}))
    return events, errors


def logged_ids(settings: Settings) -> set[str]:
    """The event ids ``<prefix>.events`` holds now (read from the clear envelopes)."""
    from memstack.pipelines.log_reader import read_bounded

    ids: set[str] = set()
    for record in read_bounded(settings.bootstrap, settings.events_topic):
        try:
            found = json.loads(record.value or b"{}").get("event_id")
        except (ValueError, AttributeError):
            continue
        if isinstance(found, str):
            ids.add(found)
    return ids


def _new(events: Sequence[Event], known: set[str], result: ImportResult) -> list[Event]:
    fresh: list[Event] = []
    for event in events:
        if event.event_id in known:
            result.already_there += 1
            continue
        known.add(event.event_id)
        fresh.append(event)
    return fresh


def via_kafka(settings: Settings, events: Sequence[Event]) -> ImportResult:
    from memstack.client import MemoryClient
    from memstack.infra.preflight import require_topics

    require_topics(settings.bootstrap, [settings.events_topic, settings.forget_topic])
    result = ImportResult(read=len(events))
    fresh = _new(events, logged_ids(settings), result)
    progress = ProgressLine("import:", len(fresh), "events")
    with MemoryClient(tenant="_import", agent="_import", settings=settings,
                      source="memstack-import") as client:
        pending = []
        for n, event in enumerate(fresh, start=1):
            pending.append(client.emit(event))
            progress.update(n, f"already there {result.already_there}")
        client.flush()
        for p in pending:
            p.get()
            result.sent += 1
    progress.update(result.sent, f"already there {result.already_there}", force=True)
    return result


def via_service(url: str, api_key: str | None, events: Sequence[Event]) -> ImportResult:
    from memstack.service.client import MemoryService

    result = ImportResult(read=len(events))
    fresh = _new(events, set(), result)
    progress = ProgressLine("import:", len(fresh), "events")
    by_tenant: dict[str, list[Event]] = {}
    for event in fresh:
        by_tenant.setdefault(event.tenant, []).append(event)
    for tenant, batch in by_tenant.items():
        with MemoryService(url, api_key, tenant=tenant, source="memstack-import") as service:
            for i in range(0, len(batch), SERVICE_BATCH):
                chunk = batch[i:i + SERVICE_BATCH]
                service.emit_many(chunk)
                result.sent += len(chunk)
                progress.update(result.sent)
    progress.update(result.sent, force=True)
    return result
