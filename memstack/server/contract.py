"""The published contract: what the OpenAPI spec says beyond what FastAPI infers.

FastAPI writes each operation's parameters and its 200 answer from the code. This module adds
the rest, so that a client in any language can be written from ``docs/openapi.json`` alone:

- every error is a problem document (RFC 9457, ``memstack.server.problems``; the routes
  declare their statuses with ``problem_responses``): FastAPI's own 422 schema, where it adds
  one, is replaced by the problem, and the problem is the only content an error declares;
- the event envelope (``schemas/event.v1.json``, the file other languages validate with) as
  component schemas, the request body of ``POST .../events`` and the ``scope`` of
  ``POST .../forget``;
- examples of both bodies.

:func:`publish` installs it on an app (``create_app`` calls it); ``memstack serve --openapi``
writes the result to docs/openapi.json and a test keeps that file current.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from memstack.schemas.events import SCHEMA_VERSION
from memstack.schemas.wire import load_schema
from memstack.server.problems import MEDIA_TYPE, problem_responses


def publish(app: FastAPI) -> None:
    """Make ``app.openapi()`` the published contract (built once, on the first call)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version,
                               description=app.description, routes=app.routes,
                               tags=app.openapi_tags)
            app.openapi_schema = _completed(spec)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override


PROBES = ("/healthz", "/readyz")
"""Health probes answer their own report on 503 too (``memstack.server.app.PROBE_RESPONSES``):
the one exception to "every error is a problem document"."""


def _completed(spec: dict[str, Any]) -> dict[str, Any]:
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    event = event_components()
    clash = sorted(set(event) & set(schemas))
    if clash:
        raise AssertionError(f"event schema names {clash} are taken in the spec")
    schemas.update(event)
    paths = spec.get("paths", {})
    for operation in (op for path, item in paths.items() if path not in PROBES
                      for op in item.values()):
        for status, response in operation.get("responses", {}).items():
            if status.startswith(("4", "5")):
                _problem_only(status, response)
    for name in ("HTTPValidationError", "ValidationError"):
        if not _referenced(spec, f"#/components/schemas/{name}"):
            schemas.pop(name, None)
    write = paths.get("/v1/tenants/{tenant}/events", {}).get("post")
    if write is not None:
        write["requestBody"] = EVENTS_BODY
    if "ForgetBody" in schemas:
        schemas["ForgetBody"]["properties"]["scope"] = {
            "$ref": "#/components/schemas/EventForgetScope",
            "description": "What to forget: one event, a session, a subject, the tenant, or "
                           "facts matching (subject, relation, object)"}
        schemas["ForgetBody"]["examples"] = [FORGET_EXAMPLE]
    return spec


def _problem_only(status: str, response: dict[str, Any]) -> None:
    """An error answers ``application/problem+json`` only (FastAPI adds an ``application/json``
    content for a response's model, and its own 422 schema where a route declares none)."""
    content = response.get("content", {})
    if MEDIA_TYPE not in content:
        content = problem_responses(int(status))[int(status)]["content"]
    response["content"] = {MEDIA_TYPE: content[MEDIA_TYPE]}


def _name(definition: str) -> str:
    return definition if definition.startswith("Event") else f"Event{definition}"


def event_components() -> dict[str, dict[str, Any]]:
    """``schemas/event.v1.json`` as component schemas: ``Event`` and its definitions, each
    named ``Event...`` (so none clashes with an answer's schema) and referenced as such."""
    schema = load_schema(SCHEMA_VERSION)
    definitions = schema.pop("$defs", {})
    for key in ("$schema", "$id"):
        schema.pop(key, None)
    components = {_name(name): _rewritten(body) for name, body in definitions.items()}
    components["Event"] = _rewritten(schema)
    return components


def _rewritten(node: Any) -> Any:
    if isinstance(node, dict):
        out = {key: _rewritten(value) for key, value in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = "#/components/schemas/" + _name(ref.removeprefix("#/$defs/"))
        return out
    if isinstance(node, list):
        return [_rewritten(item) for item in node]
    return node


def _referenced(node: Any, ref: str) -> bool:
    if isinstance(node, dict):
        return node.get("$ref") == ref or any(_referenced(v, ref) for v in node.values())
    if isinstance(node, list):
        return any(_referenced(item, ref) for item in node)
    return False


MESSAGE_EXAMPLE: dict[str, Any] = {
    "event_id": "01938a6e-7f3c-7cc2-9d1e-4b6f2a9e0c11", "tenant": "acme", "agent": "planner",
    "session": "s1", "kind": "message", "occurred_at": "2026-11-30T12:00:00Z",
    "subject": "user:ana", "provenance": {"source": "chat", "authority": "user"},
    "payload": {"role": "user", "text": "Hi, I'm Ana. I live in Lisbon."}}
FACT_EXAMPLE: dict[str, Any] = {
    "event_id": "01938a6e-7f3c-7cc2-9d1e-4b6f2a9e0c12", "tenant": "acme", "agent": "planner",
    "session": "s1", "kind": "fact_asserted", "occurred_at": "2026-11-30T12:00:01Z",
    "subject": "user:ana", "valid_from": "2019-05-01T00:00:00Z",
    "provenance": {"source": "chat", "authority": "agent"},
    "payload": {"relation": "lives_in", "object": "Lisbon"}}
FORGET_EXAMPLE: dict[str, Any] = {"scope": {"type": "subject", "subject": "user:ana"},
                                  "reason": "user asked"}

EVENTS_BODY: dict[str, Any] = {"required": True, "content": {"application/json": {
    "schema": {"type": "object", "required": ["events"], "properties": {"events": {
        "type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/Event"},
        "description": "Events of the path's tenant (schemas/event.v1.json); all are written "
                       "or none. The service's limits (default 1000 events, 4 MiB) answer 413"}}},
    "examples": {
        "message": {"summary": "a user's message", "value": {"events": [MESSAGE_EXAMPLE]}},
        "fact": {"summary": "a fact with a valid time", "value": {"events": [FACT_EXAMPLE]}},
    }}}}
