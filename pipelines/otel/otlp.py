"""Reading OTLP JSON records (an OpenTelemetry Collector's Kafka exporter, ``otlp_json``).

One Kafka record holds one ``ExportTraceServiceRequest`` (``{"resourceSpans": [...]}``) or
``ExportLogsServiceRequest`` (``{"resourceLogs": [...]}``) in the OTLP/JSON encoding: field
names in lowerCamelCase, trace and span ids as hex strings (not base64), 64-bit integers such as
``startTimeUnixNano`` as decimal strings, attribute values as ``AnyValue`` objects
(``{"stringValue": ...}``, ``{"intValue": "3"}``, ``{"arrayValue": {"values": [...]}}``, ...).

What memstack takes from them (GenAI semantic conventions, docs/otel.md):

- a **model call**: a span, a span event or a log record carrying ``gen_ai.input.messages``
  and/or ``gen_ai.output.messages`` (JSON text, or structured values), e.g. the ``chat`` span or
  the ``gen_ai.client.inference.operation.details`` event;
- a **tool run**: a span with ``gen_ai.operation.name = execute_tool`` (``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``).

Anything else (HTTP spans, metrics) is not memory and is skipped. A record that is not OTLP
JSON, or whose GenAI attributes do not parse, raises :class:`OtlpRecordError` naming the field.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from memstack.foundation.errors import MemstackError

INPUT, OUTPUT = "gen_ai.input.messages", "gen_ai.output.messages"
CONVERSATION = "gen_ai.conversation.id"
_HEX = {"traceId": re.compile(r"^[0-9a-f]{32}$"), "spanId": re.compile(r"^[0-9a-f]{16}$")}


class OtlpRecordError(MemstackError):
    """A record that is not OTLP JSON as the Collector writes it (or GenAI attributes that do
    not parse); ``field`` says where, ``reason`` a short class for metrics and the DLQ."""

    def __init__(self, field: str, rule: str, reason: str = "malformed") -> None:
        self.field = field
        self.rule = rule
        self.reason = reason
        super().__init__(f"{field}: {rule}")


@dataclass(frozen=True)
class Origin:
    """Where a GenAI signal came from: its conversation, trace, agent and tenant (if named)."""

    trace_id: str
    conversation: str | None
    agent: str | None
    tenant: str | None

    @property
    def session(self) -> str:
        """The memstack session: the conversation id, else the trace (``trace-<hex>``)."""
        return self.conversation or f"trace-{self.trace_id or 'unknown'}"


@dataclass(frozen=True)
class ModelCall:
    origin: Origin
    start: datetime
    end: datetime
    inputs: tuple[Mapping[str, Any], ...]
    outputs: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class ToolRun:
    origin: Origin
    start: datetime
    end: datetime
    tool: str
    call_id: str
    arguments: Mapping[str, Any]
    result: str | None
    is_error: bool


Signal = ModelCall | ToolRun


def _get(obj: Mapping[str, Any], camel: str) -> Any:
    """A field by its lowerCamelCase name (the spec), or its proto snake_case name."""
    if camel in obj:
        return obj[camel]
    return obj.get(re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel))


def _list(obj: Mapping[str, Any], camel: str, where: str) -> list[Any]:
    value = _get(obj, camel)
    if value is None:
        return []
    if not isinstance(value, list):
        raise OtlpRecordError(f"{where}.{camel}", "expected a list")
    return value


def any_value(value: Any, where: str) -> Any:
    """An OTLP ``AnyValue`` object as a Python value."""
    if not isinstance(value, Mapping) or not value:
        return None
    (kind, inner), = list(value.items())[:1]
    if kind == "stringValue" or kind == "string_value":
        return str(inner)
    if kind in ("intValue", "int_value"):
        return int(inner)
    if kind in ("doubleValue", "double_value"):
        return float(inner)
    if kind in ("boolValue", "bool_value"):
        return bool(inner)
    if kind in ("bytesValue", "bytes_value"):
        return base64.b64decode(inner)
    if kind in ("arrayValue", "array_value"):
        return [any_value(v, where) for v in (inner or {}).get("values", [])]
    if kind in ("kvlistValue", "kvlist_value"):
        return attributes((inner or {}).get("values", []), where)
    raise OtlpRecordError(where, f"unknown AnyValue field {kind!r}")


def attributes(kvs: Any, where: str) -> dict[str, Any]:
    if not isinstance(kvs, list):
        raise OtlpRecordError(where, "attributes must be a list of {key, value}")
    out: dict[str, Any] = {}
    for i, kv in enumerate(kvs):
        if not isinstance(kv, Mapping) or not isinstance(kv.get("key"), str):
            raise OtlpRecordError(f"{where}[{i}]", "an attribute needs a string key")
        out[kv["key"]] = any_value(kv.get("value"), f"{where}[{i}].value")
    return out


def nanos(obj: Mapping[str, Any], camel: str, where: str) -> datetime | None:
    raw = _get(obj, camel)
    if raw in (None, "", "0", 0):
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError) as exc:
        raise OtlpRecordError(f"{where}.{camel}", "expected nanoseconds since the epoch as a "
                              "decimal string") from exc
    seconds, rest = divmod(value, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=rest // 1000)


def hex_id(obj: Mapping[str, Any], camel: str, where: str) -> str:
    raw = _get(obj, camel) or ""
    if raw and not _HEX[camel].match(str(raw)):
        raise OtlpRecordError(f"{where}.{camel}", "OTLP JSON encodes trace and span ids as "
                              "lowercase hex (not base64, as protobuf's JSON mapping would)")
    return str(raw)


def decode(value: bytes | None) -> dict[str, Any]:
    """The record's JSON object, or :class:`OtlpRecordError`."""
    try:
        data = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise OtlpRecordError("$", f"not UTF-8 JSON: {exc}", "not_json") from exc
    if not isinstance(data, dict):
        raise OtlpRecordError("$", "an OTLP JSON record is an object", "not_otlp")
    if not any(k in data for k in ("resourceSpans", "resourceLogs", "resourceMetrics",
                                   "resource_spans", "resource_logs", "resource_metrics")):
        raise OtlpRecordError("$", "neither resourceSpans nor resourceLogs: not an OTLP "
                              "ExportTraceServiceRequest or ExportLogsServiceRequest "
                              "(set encoding: otlp_json on the Collector's kafka exporter)",
                              "not_otlp")
    return data


def signals(data: Mapping[str, Any], tenant: str | None = None) -> list[Signal]:
    """The GenAI model calls and tool runs of one decoded record, in time order."""
    found = [*_from_spans(data, tenant), *_from_logs(data, tenant)]
    return sorted(found, key=lambda s: (s.start, s.end))


def _resources(data: Mapping[str, Any], kind: str, scoped: str, items: str
               ) -> Iterator[tuple[dict[str, Any], str, Mapping[str, Any]]]:
    for r, resource in enumerate(_list(data, kind, "$")):
        where = f"{kind}[{r}]"
        res = _get(resource, "resource") or {}
        attrs = attributes(_get(res, "attributes") or [], f"{where}.resource.attributes")
        for s, scope in enumerate(_list(resource, scoped, where)):
            for i, item in enumerate(_list(scope, items, f"{where}.{scoped}[{s}]")):
                if not isinstance(item, Mapping):
                    raise OtlpRecordError(f"{where}.{scoped}[{s}].{items}[{i}]",
                                          "expected an object")
                yield attrs, f"{where}.{scoped}[{s}].{items}[{i}]", item


def _origin(resource: Mapping[str, Any], attrs: Mapping[str, Any], trace_id: str,
            tenant: str | None) -> Origin:
    agent = attrs.get("gen_ai.agent.name") or resource.get("service.name")
    conversation = attrs.get(CONVERSATION)
    return Origin(trace_id, str(conversation) if conversation else None,
                  str(agent) if agent else None,
                  tenant or _str(resource.get("memstack.tenant")))


def _str(value: Any) -> str | None:
    return str(value) if value else None


def _from_spans(data: Mapping[str, Any], tenant: str | None) -> Iterator[Signal]:
    for resource, where, span in _resources(data, "resourceSpans", "scopeSpans", "spans"):
        trace_id = hex_id(span, "traceId", where)
        hex_id(span, "spanId", where)
        attrs = attributes(_get(span, "attributes") or [], f"{where}.attributes")
        origin = _origin(resource, attrs, trace_id, tenant)
        start = nanos(span, "startTimeUnixNano", where)
        end = nanos(span, "endTimeUnixNano", where) or start
        if start is None or end is None:
            raise OtlpRecordError(f"{where}.startTimeUnixNano", "a span needs its start time")
        if attrs.get("gen_ai.operation.name") == "execute_tool":
            yield _tool_run(origin, start, end, attrs, span, where)
        elif INPUT in attrs or OUTPUT in attrs:
            yield _model_call(origin, start, end, attrs, f"{where}.attributes")
        for e, event in enumerate(_list(span, "events", where)):
            ev_where = f"{where}.events[{e}]"
            ev_attrs = attributes(_get(event, "attributes") or [], f"{ev_where}.attributes")
            if INPUT in ev_attrs or OUTPUT in ev_attrs:
                at = nanos(event, "timeUnixNano", ev_where) or end
                ev_origin = _origin(resource, {**attrs, **ev_attrs}, trace_id, tenant)
                yield _model_call(ev_origin, start, at, ev_attrs, f"{ev_where}.attributes")


def _from_logs(data: Mapping[str, Any], tenant: str | None) -> Iterator[Signal]:
    for resource, where, record in _resources(data, "resourceLogs", "scopeLogs", "logRecords"):
        attrs = attributes(_get(record, "attributes") or [], f"{where}.attributes")
        if INPUT not in attrs and OUTPUT not in attrs:
            continue
        at = nanos(record, "timeUnixNano", where) or nanos(record, "observedTimeUnixNano",
                                                            where)
        if at is None:
            raise OtlpRecordError(f"{where}.timeUnixNano", "a log record needs its time")
        origin = _origin(resource, attrs, hex_id(record, "traceId", where), tenant)
        yield _model_call(origin, at, at, attrs, f"{where}.attributes")


def _messages(value: Any, where: str) -> tuple[Mapping[str, Any], ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise OtlpRecordError(where, f"not JSON: {exc}") from exc
    if not isinstance(value, list) or not all(isinstance(m, Mapping) for m in value):
        raise OtlpRecordError(where, "expected a list of messages {role, parts}")
    for i, message in enumerate(value):
        if not isinstance(message.get("role"), str) or not isinstance(
                message.get("parts", []), list):
            raise OtlpRecordError(f"{where}[{i}]", "a message needs a role and a parts list")
    return tuple(value)


def _model_call(origin: Origin, start: datetime, end: datetime, attrs: Mapping[str, Any],
                where: str) -> ModelCall:
    return ModelCall(origin, start, end, _messages(attrs.get(INPUT), f"{where}.{INPUT}"),
                     _messages(attrs.get(OUTPUT), f"{where}.{OUTPUT}"))


def _tool_run(origin: Origin, start: datetime, end: datetime, attrs: Mapping[str, Any],
              span: Mapping[str, Any], where: str) -> ToolRun:
    tool, call_id = attrs.get("gen_ai.tool.name"), attrs.get("gen_ai.tool.call.id")
    if not tool or not call_id:
        raise OtlpRecordError(f"{where}.attributes", "an execute_tool span needs "
                              "gen_ai.tool.name and gen_ai.tool.call.id")
    status = _get(span, "status") or {}
    failed = str(_get(status, "code") or "") in ("2", "STATUS_CODE_ERROR")
    result = attrs.get("gen_ai.tool.call.result")
    return ToolRun(origin, start, end, str(tool), str(call_id),
                   arguments_of(attrs.get("gen_ai.tool.call.arguments")),
                   None if result is None else as_text(result), failed)


def arguments_of(raw: Any) -> Mapping[str, Any]:
    """Tool arguments as an object (JSON text is parsed; anything else is wrapped)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {"input": raw}
    if raw is None:
        return {}
    return raw if isinstance(raw, Mapping) else {"input": raw}


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True,
                                                           ensure_ascii=False, default=str)


def parts_of(message: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    parts = message.get("parts") or []
    return [p for p in parts if isinstance(p, Mapping)]
