"""OpenTelemetry spans for memory operations (GenAI semantic conventions), off by default.

The clients (``MemoryClient``, ``AsyncMemoryClient``, ``MemoryService``) and the service's HTTP
routes emit one span per memory operation when tracing is on: ``MEMSTACK_OTEL=1`` (exported
with the standard OTLP/HTTP exporter, configured by the usual ``OTEL_EXPORTER_OTLP_*``
variables, unless the application already set a global tracer provider), or a
``tracer_provider=`` passed to the client. Attributes follow the GenAI memory conventions
(docs/otel.md lists them): ``gen_ai.operation.name`` is ``create_memory``, ``update_memory``,
``search_memory`` or ``delete_memory``; ``gen_ai.memory.store.id``, ``gen_ai.memory.record.id``,
``gen_ai.memory.record.count``, ``gen_ai.memory.query.text`` (only with
``MEMSTACK_OTEL_CONTENT=1``: it is user content), ``gen_ai.provider.name`` = ``memstack``,
``gen_ai.conversation.id`` (the session), plus ``memstack.tenant`` and ``memstack.event.kinds``.

``opentelemetry-api`` is an optional import here: the core install does not need it, and
without it no span is made (``pip install 'memstack[otel]'`` adds the API, SDK and exporter).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

log = logging.getLogger(__name__)

ENABLE_ENV = "MEMSTACK_OTEL"
CONTENT_ENV = "MEMSTACK_OTEL_CONTENT"
PROVIDER = "memstack"
SCOPE = "memstack"

CREATE, UPDATE, SEARCH, DELETE = ("create_memory", "update_memory", "search_memory",
                                  "delete_memory")
_OP_OF_KIND = {"fact_asserted": UPDATE, "fact_retracted": UPDATE, "forget_requested": DELETE}
READ_ROUTES = frozenset({"facts", "history", "search", "records", "context"})

_default_provider: Any = None


def _on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def operation_of(kinds: Iterable[str]) -> str:
    """The GenAI memory operation of a write of events of these kinds: facts update memory,
    a forget request deletes it, everything else (messages, tools, notes) creates it."""
    ops = {_OP_OF_KIND.get(str(kind), CREATE) for kind in kinds}
    return ops.pop() if len(ops) == 1 else CREATE


class MemoryTracer:
    """Makes the spans of memory operations on one OpenTelemetry tracer."""

    def __init__(self, tracer: Any, capture_content: bool | None = None) -> None:
        self._tracer = tracer
        self.capture_content = _on(CONTENT_ENV) if capture_content is None else capture_content

    @contextmanager
    def span(self, operation: str, *, tenant: str, server: bool = False,
             record_id: str | None = None, record_count: int | None = None,
             query_text: str | None = None, session: str | None = None,
             kinds: Iterable[str] = (), context: Any = None) -> Iterator[Any]:
        """A span named ``"{operation} {tenant}"`` (CLIENT, or SERVER in the service); an
        exception inside marks it as an error and is re-raised."""
        from opentelemetry.trace import SpanKind

        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation, "gen_ai.provider.name": PROVIDER,
            "gen_ai.memory.store.id": tenant, "memstack.tenant": tenant}
        optional = {"gen_ai.memory.record.id": record_id,
                    "gen_ai.memory.record.count": record_count,
                    "gen_ai.conversation.id": session,
                    "gen_ai.memory.query.text": query_text if self.capture_content else None,
                    "memstack.event.kinds": sorted({str(k) for k in kinds}) or None}
        attributes.update({k: v for k, v in optional.items() if v is not None})
        kind = SpanKind.SERVER if server else SpanKind.CLIENT
        with self._tracer.start_as_current_span(f"{operation} {tenant}", context=context,
                                                kind=kind, attributes=attributes) as span:
            yield span

    def write_span(self, tenant: str | None,
                   events: Iterable[Any]) -> AbstractContextManager[Any]:
        """The span of writing built events (``Event`` objects or their JSON as dicts); the
        tenant defaults to the first event's."""
        items = list(events)
        tenant = tenant or (_field(items[0], "tenant") if items else "")
        kinds = [_field(e, "kind") for e in items]
        sessions = {_field(e, "session") for e in items}
        return self.span(operation_of(kinds), tenant=tenant, kinds=kinds,
                         record_count=len(items),
                         record_id=_field(items[0], "event_id") if len(items) == 1 else None,
                         session=sessions.pop() if len(sessions) == 1 else None)

    def headers(self) -> dict[str, str]:
        """W3C trace context of the current span, for an outgoing HTTP request."""
        from opentelemetry import propagate

        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier


    def call_span(self, tenant: str, method: str, path: str, params: Mapping[str, Any] | None,
                  body: Any) -> AbstractContextManager[Any]:
        """The span of one HTTP call of the service API (``/v1/tenants/T/<route>``); calls
        that are no memory operation (forget status, the change feed) get none."""
        route = path.rstrip("/").split("/")[4:]
        args = params or {}
        if route == ["events"] and method == "POST" and isinstance(body, Mapping):
            return self.write_span(tenant, body.get("events") or [])
        if route == ["forget"] and method == "POST":
            return self.span(DELETE, tenant=tenant)
        if len(route) == 1 and route[0] in READ_ROUTES:
            return self.span(SEARCH, tenant=tenant, query_text=args.get("text"),
                             session=args.get("session"), kinds=[route[0]])
        return nullcontext()


RESULT_LISTS = ("facts", "versions", "hits", "records", "items", "written")


def note_result(span: Any, result: Any) -> None:
    """Record what a call answered on its span: the count of rows, the forget request id."""
    if span is None:
        return
    for name in RESULT_LISTS:
        rows = getattr(result, name, None)
        if isinstance(rows, (list, tuple)):
            span.set_attribute("gen_ai.memory.record.count", len(rows))
            return
    request_id = getattr(result, "request_id", None)
    if isinstance(request_id, str):
        span.set_attribute("gen_ai.memory.record.id", request_id)


def _field(event: Any, name: str) -> str:
    value = event.get(name) if isinstance(event, Mapping) else getattr(event, name, None)
    return str(getattr(value, "value", value))


def memory_tracer(tracer_provider: Any = None) -> MemoryTracer | None:
    """The tracer of a client or the service: None (no spans) unless a provider is given or
    ``MEMSTACK_OTEL=1``; None also when ``opentelemetry-api`` is not installed, and for
    ``tracer_provider=False`` (never traced, e.g. the service's own producer: its HTTP
    route's span already stands for the write)."""
    if tracer_provider is False or (tracer_provider is None and not _on(ENABLE_ENV)):
        return None
    try:
        from opentelemetry import trace
    except ImportError:
        log.warning("%s=1 but opentelemetry-api is not installed: no spans; install it with "
                    "pip install 'memstack[otel]'", ENABLE_ENV)
        return None
    provider = tracer_provider if tracer_provider is not None else _env_provider(trace)
    if provider is None:
        return None
    return MemoryTracer(provider.get_tracer(SCOPE))


def _env_provider(trace: Any) -> Any:
    """The application's global provider when it set one; else one exporting over OTLP/HTTP
    (made once per process and installed as the global provider)."""
    global _default_provider
    current = trace.get_tracer_provider()
    if type(current).__name__ not in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return current
    if _default_provider is None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            log.warning("%s=1 but the OpenTelemetry SDK or its OTLP exporter is missing: no "
                        "spans; install them with pip install 'memstack[otel]'", ENABLE_ENV)
            return None
        service = os.environ.get("OTEL_SERVICE_NAME") or "memstack"
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        _default_provider = provider
    return _default_provider


def maybe(tracer: MemoryTracer | None,
          make: Any) -> AbstractContextManager[Any]:
    """``make(tracer)`` when tracing is on, else a context that does nothing."""
    return nullcontext() if tracer is None else make(tracer)
