"""Generates OTLP JSON records of an agent's GenAI telemetry with the OpenTelemetry SDK itself.

The spans and log records are made by the SDK (tracer and logger providers with in-memory
exporters, fixed clock values and a counting id generator, so the output is the same on every
run), encoded by the OTLP encoder the OTLP exporters use
(``opentelemetry-exporter-otlp-proto-common``), and written as OTLP JSON with protobuf's
``json_format``: camelCase field names, 64-bit integers as strings, enums as integers, and the
trace and span ids turned from protobuf's base64 into the hex the OTLP JSON spec requires.
One line of the output = one Kafka record value, as an OpenTelemetry Collector's Kafka exporter
(``encoding: otlp_json``) writes it.

The conversation (``conv-ana``): five model calls, each repeating the history; a tool call
whose ``execute_tool`` span sits between two calls; the user says "yes" twice. A second
conversation (``conv-bo``) arrives as a log record (``gen_ai.client.inference.operation.details``),
and one record holds only an HTTP span (no GenAI content).

    python -m tests.otel.genai_records tests/otel/data/genai_otlp.jsonl
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode

T0 = 1_764_590_400_000_000_000  # 2025-12-01T12:00:00Z in ns
SECOND = 1_000_000_000
DATA = Path(__file__).parent / "data" / "genai_otlp.jsonl"
RESOURCE = Resource({"service.name": "flat-agent", "telemetry.sdk.language": "python",
                     "telemetry.sdk.name": "opentelemetry"})


class CountingIds(IdGenerator):
    def __init__(self) -> None:
        self.n = 0

    def generate_span_id(self) -> int:
        self.n += 1
        return 0x1000 + self.n

    def generate_trace_id(self) -> int:
        self.n += 1
        return 0xABC0_0000_0000_0000_0000_0000_0000 + self.n


def text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


U1 = text("user", "Hi, I'm Ana and I live in Lisbon.")
A1 = text("assistant", "Hello Ana! How can I help?")
U2 = text("user", "Find me a flat in Porto.")
CALL = {"role": "assistant", "parts": [{"type": "tool_call", "id": "call-1",
                                        "name": "flat_search", "arguments": {"city": "Porto"}}]}
RESULT = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call-1",
                                     "response": "3 flats found"}]}
A3 = text("assistant", "I found 3 flats in Porto. Shall I book a visit?")
YES = text("user", "yes")
A4 = text("assistant", "Great. Morning or afternoon?")
A5 = text("assistant", "Booked for the morning.")

CALLS = [  # (start s, end s, inputs, outputs)
    (0, 1, [U1], [A1]),
    (10, 12, [U1, A1, U2], [CALL]),
    (13, 14, [U1, A1, U2, CALL, RESULT], [A3]),
    (20, 21, [U1, A1, U2, CALL, RESULT, A3, YES], [A4]),
    (30, 31, [U1, A1, U2, CALL, RESULT, A3, YES, A4, YES], [A5]),
]


def _chat(tracer: Any, start: int, end: int, inputs: list[Any], outputs: list[Any]) -> None:
    span = tracer.start_span("chat gpt-x", kind=SpanKind.CLIENT, start_time=T0 + start * SECOND,
                             attributes={
                                 "gen_ai.operation.name": "chat",
                                 "gen_ai.provider.name": "openai",
                                 "gen_ai.request.model": "gpt-x",
                                 "gen_ai.conversation.id": "conv-ana",
                                 "gen_ai.agent.name": "flat-agent",
                                 "gen_ai.system_instructions": json.dumps(
                                     [{"type": "text", "content": "You find flats."}]),
                                 "gen_ai.input.messages": json.dumps(inputs),
                                 "gen_ai.output.messages": json.dumps(outputs)})
    span.end(end_time=T0 + end * SECOND)


def _tool(tracer: Any) -> None:
    span = tracer.start_span("execute_tool flat_search", kind=SpanKind.INTERNAL,
                             start_time=T0 + 12 * SECOND + SECOND // 10, attributes={
                                 "gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.name": "flat_search",
                                 "gen_ai.tool.call.id": "call-1",
                                 "gen_ai.tool.call.arguments": json.dumps({"city": "Porto"}),
                                 "gen_ai.tool.call.result": "3 flats found",
                                 "gen_ai.conversation.id": "conv-ana"})
    span.set_status(Status(StatusCode.OK))
    span.end(end_time=T0 + 12 * SECOND + SECOND // 2)


def _http(tracer: Any) -> None:
    span = tracer.start_span("GET /healthz", kind=SpanKind.SERVER, start_time=T0 + 2 * SECOND,
                             attributes={"http.request.method": "GET"})
    span.end(end_time=T0 + 2 * SECOND + 1000)


def make_spans() -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE, id_generator=CountingIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("flat-agent.genai")
    for start, end, inputs, outputs in CALLS[:2]:
        _chat(tracer, start, end, inputs, outputs)
    _tool(tracer)
    _http(tracer)
    for start, end, inputs, outputs in CALLS[2:]:
        _chat(tracer, start, end, inputs, outputs)
    provider.shutdown()
    return list(exporter.get_finished_spans())


def make_logs() -> list[Any]:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("flat-agent.genai")
    logger.emit(timestamp=T0 + 40 * SECOND, observed_timestamp=T0 + 40 * SECOND,
                event_name="gen_ai.client.inference.operation.details", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.conversation.id": "conv-bo",
                    "gen_ai.input.messages": json.dumps([text("user", "Bo here, I moved.")]),
                    "gen_ai.output.messages": json.dumps([text("assistant", "Noted, Bo.")])})
    provider.shutdown()
    return list(exporter.get_finished_logs())


def _hex_ids(node: Any) -> Any:
    """protobuf's JSON mapping writes bytes as base64; OTLP JSON wants ids in hex."""
    if isinstance(node, dict):
        return {k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId")
                    and isinstance(v, str) else _hex_ids(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def otlp_json(message: Any, hex_ids: bool = True) -> str:
    data = json_format.MessageToDict(message, use_integers_for_enums=True)
    return json.dumps(_hex_ids(data) if hex_ids else data, sort_keys=True)


def records(hex_ids: bool = True) -> list[str]:
    """The Kafka record values: the spans in batches as a Collector would send them, then the
    logs. The last two model calls share one record, in reverse order."""
    spans = make_spans()
    by_name: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    chats = by_name["chat gpt-x"]
    batches: Sequence[list[ReadableSpan]] = [
        [chats[0]], [chats[1], by_name["execute_tool flat_search"][0]],
        by_name["GET /healthz"], [chats[2]], [chats[4], chats[3]]]
    out = [otlp_json(encode_spans(batch), hex_ids) for batch in batches]
    out.append(otlp_json(encode_logs(make_logs()), hex_ids))
    return out


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else DATA
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(line + "\n" for line in records()), encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
