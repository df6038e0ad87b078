"""Watching the service: ``GET /metrics`` and the per-request metrics and spans of its routes.

:class:`ObserveMiddleware` (pure ASGI, a few microseconds per request) times the memory routes:
reads by kind into ``memstack_query_seconds``, forget requests logged, and, when tracing is on
(``MEMSTACK_OTEL=1``), one SERVER span per memory operation following the GenAI conventions
(``create_memory``/``update_memory`` for writes, ``search_memory`` for reads, ``delete_memory``
for forgets; docs/otel.md), joined to the caller's trace when the request carries a W3C
``traceparent``. The write route tells the middleware which event kinds it wrote through the
request state (``memstack_kinds``), so a write of facts is an ``update_memory``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4

from memstack.foundation.telemetry import (
    CREATE,
    DELETE,
    READ_ROUTES,
    SEARCH,
    MemoryTracer,
    operation_of,
)
from memstack.pipelines.metrics import LiveMetrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

KINDS_STATE = "memstack_kinds"
"""Request-state key where the write route leaves the kinds of the events it wrote."""


def route_of(method: str, path: str) -> tuple[str, str] | None:
    """``(tenant, route)`` of a memory route (reads, ``events``, ``forget``), else None."""
    parts = path.strip("/").split("/")
    if len(parts) != 4 or parts[:2] != ["v1", "tenants"]:
        return None
    tenant, route = parts[2], parts[3]
    if (method == "GET" and route in READ_ROUTES) or (
            method == "POST" and route in ("events", "forget")):
        return tenant, route
    return None


class ObserveMiddleware:
    """Metrics and spans around the memory routes; every other request passes untouched."""

    def __init__(self, app: ASGIApp, metrics: LiveMetrics | None = None,
                 tracer: MemoryTracer | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = route_of(scope.get("method", ""), scope.get("path", "")) if (
            scope["type"] == "http") else None
        if route is None:
            await self.app(scope, receive, send)
            return
        tenant, name = route
        state: dict[str, Any] = scope.setdefault("state", {})
        status = [500]

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        started = time.perf_counter()
        with self._span(scope, tenant, name) as span:
            try:
                await self.app(scope, receive, watched)
            finally:
                self._finish(span, tenant, name, status[0], time.perf_counter() - started,
                             state)

    def _span(self, scope: Scope, tenant: str, route: str) -> AbstractContextManager[Any]:
        if self.tracer is None:
            return nullcontext()
        from opentelemetry import propagate

        headers = {k.decode("latin-1"): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        parent = propagate.extract(headers)
        query = _query(scope)
        operation = (SEARCH if route in READ_ROUTES else DELETE if route == "forget"
                     else CREATE)
        return self.tracer.span(operation, tenant=tenant, server=True, context=parent,
                                query_text=query.get("text"), session=query.get("session"),
                                kinds=[route] if route in READ_ROUTES else ())

    def _finish(self, span: Any, tenant: str, route: str, status: int, seconds: float,
                state: dict[str, Any]) -> None:
        if self.metrics is not None:
            if route in READ_ROUTES:
                self.metrics.observe_query(route, seconds, status)
            elif route == "forget" and status == 200:
                self.metrics.forget_logged()
        if span is not None:
            span.set_attribute("http.response.status_code", status)
            kinds = state.get(KINDS_STATE)
            if kinds:
                operation = operation_of(kinds)
                span.set_attribute("gen_ai.operation.name", operation)
                span.set_attribute("memstack.event.kinds", sorted(set(kinds)))
                span.set_attribute("gen_ai.memory.record.count", len(kinds))
                span.update_name(f"{operation} {tenant}")
            if status >= 500:
                from opentelemetry.trace import Status, StatusCode

                span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))


def _query(scope: Scope) -> dict[str, str]:
    from urllib.parse import parse_qsl

    raw = scope.get("query_string", b"").decode("latin-1")
    return dict(parse_qsl(raw))


def add_metrics_route(app: FastAPI, metrics: LiveMetrics) -> None:
    """``GET /metrics``: the Prometheus text format (no key: scrape it from loopback)."""

    async def scrape() -> Response:
        body = await run_in_threadpool(metrics.exposition)  # lag reads the broker
        return Response(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)

    app.get("/metrics", tags=["service"], include_in_schema=False)(scrape)


def observe(app: FastAPI, metrics: LiveMetrics | None,
            tracer: MemoryTracer | None) -> None:
    """Install the middleware (and ``/metrics`` when there are metrics) on the app."""
    if metrics is not None:
        add_metrics_route(app, metrics)
    if metrics is not None or tracer is not None:
        app.add_middleware(ObserveMiddleware, metrics=metrics, tracer=tracer)
