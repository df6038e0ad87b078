"""Records, memory rows and the memory operator's dispatch."""

from __future__ import annotations

import json

import pytest

from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import MemoryRow, Mutation, PutMemory, PutRecord, RecordRow
from memstack.operators.records import NotARecordEventError, record_mutations
from memstack.schemas.events import (
    Event,
    EventKind,
    ForgetRequestedPayload,
    ForgetScope,
    MessagePayload,
    ObservationPayload,
    Provenance,
    ToolCallPayload,
)
from memstack.schemas.ids import uuid7
from tests.operators.givens import Scenario, at, build, fact, logged, position, year


def _event(kind: EventKind, payload: object, **extra: object) -> Event:
    return Event.model_validate({
        "event_id": str(uuid7()), "tenant": "t1", "agent": "a1", "session": "s1",
        "kind": kind, "occurred_at": at(0), "provenance": Provenance(source="test",
                                                                      authority="user"),
        "payload": payload, **extra,
    })


def _record(mutations: list[Mutation]) -> RecordRow:
    puts = [m.row for m in mutations if isinstance(m, PutRecord)]
    assert len(puts) == 1
    return puts[0]


def _memory(mutations: list[Mutation]) -> MemoryRow:
    puts = [m.row for m in mutations if isinstance(m, PutMemory)]
    assert len(puts) == 1
    return puts[0]


def test_a_message_becomes_a_record_and_a_memory_with_log_time_and_validity() -> None:
    event = _event(EventKind.MESSAGE, MessagePayload(role="user", text="I moved to Paris"),
                   subject="alice", valid_from=year(2020))

    mutations = record_mutations(logged(event, tt=7, partition=2))

    assert [type(m) for m in mutations] == [PutRecord, PutMemory]
    record, memory = _record(mutations), _memory(mutations)
    assert (record.tt, record.partition, record.offset) == (at(7), 2, 7)
    assert (record.vt_from, record.vt_to, record.occurred_at) == (year(2020), None, at(0))
    assert (record.source, record.authority, record.kind) == ("test", "user", "message")
    assert json.loads(record.payload_json) == {"role": "user", "text": "I moved to Paris"}
    assert memory.memory_id == memory.event_id == event.event_id
    assert (memory.text, memory.tt_from, memory.tt_to) == ("I moved to Paris", at(7), None)


def test_payload_json_is_canonical_whatever_the_argument_order() -> None:
    one = _event(EventKind.TOOL_CALL, ToolCallPayload(tool="t", call_id="c",
                                                      arguments={"b": 1, "a": [2, "é"]}))
    two = _event(EventKind.TOOL_CALL, ToolCallPayload(tool="t", call_id="c",
                                                      arguments={"a": [2, "é"], "b": 1}))
    rows = [_record(record_mutations(logged(e, tt=1))) for e in (one, two)]
    assert rows[0].payload_json == rows[1].payload_json
    assert rows[0].payload_json == (
        '{"arguments":{"a":[2,"é"],"b":1},"call_id":"c","tool":"t"}')


def test_an_event_without_text_gets_a_record_but_no_memory() -> None:
    event = _event(EventKind.OBSERVATION, ObservationPayload(text="   "))
    assert [type(m) for m in record_mutations(logged(event, tt=1))] == [PutRecord]


def test_a_fact_is_not_a_record() -> None:
    with pytest.raises(NotARecordEventError, match="fact"):
        record_mutations(fact("alice", "lives_in", "Paris", tt=1))


def test_index_dispatches_and_ignores_forget_requests() -> None:
    op = MemoryOperator()
    forget = _event(EventKind.FORGET_REQUESTED,
                    ForgetRequestedPayload(scope=ForgetScope(type="subject", subject="alice")))
    message = _event(EventKind.MESSAGE, MessagePayload(role="user", text="hi"))

    assert op.apply(logged(forget, tt=1)) == []
    assert [type(m) for m in op.apply(logged(message, tt=2))] == [PutRecord, PutMemory]
    assert op.id == "index"


def test_a_batch_gives_the_same_store_as_one_by_one() -> None:
    events = [
        fact("dave", "lives_in", "Oslo", tt=3, valid_from=year(2019), partition=0),
        logged(_event(EventKind.MESSAGE, MessagePayload(role="user", text="hi")), tt=1),
        fact("dave", "lives_in", "Rome", tt=2, valid_from=year(2021), partition=1),
        fact("dave", "lives_in", "Lima", tt=4, valid_from=year(2020), partition=0),
    ]
    one_by_one = build(events)

    batched = Scenario().store.apply(MemoryOperator().apply_batch(events))

    assert batched == one_by_one
    assert len(batched.records) == 1 and len(batched.entries) == 3


def test_position_helper_orders_by_log_time_then_partition() -> None:
    assert position(1, partition=5) < position(2, partition=0)
