"""OTLP JSON reading, case by case (pure): values, ids, times, tool errors, refusals."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from memstack.pipelines.otel.otlp import (
    ModelCall,
    OtlpRecordError,
    ToolRun,
    any_value,
    decode,
    signals,
)

TRACE, SPAN = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"


def record(span: dict[str, object], snake: bool = False) -> bytes:
    spans = {"spans": [span]}
    body = ({"resource_spans": [{"scope_spans": [spans]}]} if snake
            else {"resourceSpans": [{"resource": {"attributes": [
                {"key": "memstack.tenant", "value": {"stringValue": "acme"}}]},
                "scopeSpans": [spans]}]})
    return json.dumps(body).encode()


def span(attributes: dict[str, object], **extra: object) -> dict[str, object]:
    return {"traceId": TRACE, "spanId": SPAN, "name": "x", "startTimeUnixNano":
            "1764590400123456789", "endTimeUnixNano": "1764590401000000000",
            "attributes": [{"key": k, "value": v} for k, v in attributes.items()], **extra}


def test_any_values() -> None:
    assert any_value({"intValue": "42"}, "$") == 42
    assert any_value({"arrayValue": {"values": [{"stringValue": "a"},
                                                {"boolValue": True}]}}, "$") == ["a", True]
    assert any_value({"kvlistValue": {"values": [{"key": "k", "value": {"doubleValue": 1.5}}]}},
                     "$") == {"k": 1.5}
    with pytest.raises(OtlpRecordError, match="unknown AnyValue"):
        any_value({"fooValue": 1}, "$")


def test_a_tool_span_with_an_error_status() -> None:
    found = signals(decode(record(span({
        "gen_ai.operation.name": {"stringValue": "execute_tool"},
        "gen_ai.tool.name": {"stringValue": "search"},
        "gen_ai.tool.call.id": {"stringValue": "c1"},
        "gen_ai.tool.call.arguments": {"stringValue": "not json"}},
        status={"code": 2, "message": "boom"}))))
    run, = found
    assert isinstance(run, ToolRun) and run.is_error and run.result is None
    assert run.arguments == {"input": "not json"} and run.origin.tenant == "acme"
    assert run.start == datetime(2025, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)  # ns -> us exact
    assert run.origin.session == f"trace-{TRACE}"


def test_snake_case_fields_are_read_too() -> None:
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}])
    call, = signals(decode(record({**span({"gen_ai.input.messages": {"string_value": messages}}),
                                   "trace_id": TRACE}, snake=True)), tenant="t")
    assert isinstance(call, ModelCall) and call.inputs[0]["role"] == "user"


@pytest.mark.parametrize(("value", "field"), [
    (b"\xff", "$"),
    (b"[1]", "$"),
    (b'{"resource": {}}', "$"),
    (record(span({}, traceId="W47/95gDgQPSabYzgT/GDA==")), ".traceId"),
    (record(span({}, startTimeUnixNano="soon")), ".startTimeUnixNano"),
    (record(span({"gen_ai.output.messages": {"stringValue": '{"role": "x"}'}})),
     "gen_ai.output.messages"),
    (record(span({"gen_ai.operation.name": {"stringValue": "execute_tool"}})), ".attributes"),
])
def test_refusals_name_the_field(value: bytes, field: str) -> None:
    with pytest.raises(OtlpRecordError) as caught:
        signals(decode(value))
    assert caught.value.field.endswith(field), caught.value.field
