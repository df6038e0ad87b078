"""Raw records and memory rows: message, tool_call, tool_result, observation, note events.

Each such event becomes one immutable :class:`RecordRow` (kept whole, never rewritten) and, when
it carries text, one :class:`MemoryRow` for the vector and full-text index. Valid time is the
event's (``valid_start`` .. ``valid_to``); transaction time is the log's.
"""

from __future__ import annotations

import json
import logging

from memstack.foundation.errors import MemstackError
from memstack.operators.log import LoggedEvent
from memstack.operators.mutations import MemoryRow, Mutation, PutMemory, PutRecord, RecordRow
from memstack.schemas.events import TEXT_KINDS, Event

log = logging.getLogger(__name__)


class NotARecordEventError(MemstackError, ValueError):
    """The event's kind is not a record kind; route facts and forget requests elsewhere."""


def canonical_payload_json(event: Event) -> str:
    """The payload as canonical JSON: sorted keys, compact, no nulls, UTF-8 kept as is."""
    data = event.payload.model_dump(mode="json", exclude_none=True)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def record_row(logged: LoggedEvent) -> RecordRow:
    event, pos = logged.event, logged.position
    return RecordRow(
        event_id=event.event_id,
        tenant=event.tenant,
        agent=event.agent,
        session=event.session,
        subject=event.subject,
        kind=str(event.kind),
        occurred_at=event.occurred_at,
        vt_from=event.valid_start,
        vt_to=event.valid_to,
        tt=pos.log_time,
        partition=pos.partition,
        offset=pos.offset,
        payload_json=canonical_payload_json(event),
        text=event.text(),
        source=event.provenance.source,
        authority=event.provenance.authority,
        metadata=dict(event.metadata or {}),
    )


def memory_row(logged: LoggedEvent, text: str) -> MemoryRow:
    event, pos = logged.event, logged.position
    return MemoryRow(
        memory_id=event.event_id,
        event_id=event.event_id,
        tenant=event.tenant,
        session=event.session,
        subject=event.subject,
        kind=str(event.kind),
        text=text,
        vt_from=event.valid_start,
        vt_to=event.valid_to,
        tt_from=pos.log_time,
        tt_to=None,
        partition=pos.partition,
        offset=pos.offset,
        metadata=dict(event.metadata or {}),
    )


def record_mutations(logged: LoggedEvent) -> list[Mutation]:
    """PutRecord, plus PutMemory when the event has non-empty text."""
    event = logged.event
    if event.kind not in TEXT_KINDS:
        raise NotARecordEventError(
            f"event {event.event_id} of kind '{event.kind}' is not a record kind "
            f"({', '.join(sorted(TEXT_KINDS))}); route it to the fact or forget operator"
        )
    out: list[Mutation] = [PutRecord(record_row(logged))]
    text = event.text()
    if text and text.strip():
        out.append(PutMemory(memory_row(logged, text)))
    log.debug("record %s at %s: %d mutations", event.event_id, logged.position, len(out))
    return out
