"""The read operations' parameters are declared once (memstack.view.reads) and every face of
memory takes exactly those: the HTTP routes of the service and of the router (generated from
the declaration), the sync and async HTTP clients, the MCP backend and the MCP tools, the local
view and the router's view. A parameter added to one face and not to the declaration fails."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from memstack.mcp.backend import MemoryBackend, fixed
from memstack.mcp.tools import build_server
from memstack.server.api_keys import ApiKeys
from memstack.server.app import create_app
from memstack.server.router.app import router_app
from memstack.server.router.fanout import Fanout
from memstack.server.router.view import RoutedView
from memstack.service.client import AsyncMemoryService, MemoryService
from memstack.view.memory_view import AsOfView
from memstack.view.reads import READS, AsOfParams, Operation

EMPTY = (None, (), [], "current")
"""Defaults that all mean "not given" (``current`` is the MCP tools' spelling of now)."""
AS_OF = set(AsOfParams.model_fields)
OUT_OF_VIEW = frozenset({"ranking"})
"""The local view's Python-only knob (the ranking's stages), not a read parameter."""


def declared(op: Operation) -> dict[str, Any]:
    fields = READS[op].params.model_fields
    return {name: None if f.is_required() else _plain(f.default) for name, f in fields.items()}


def _plain(value: Any) -> Any:
    return None if value in EMPTY else value


def signature_of(fn: Any, *, drop: frozenset[str] = frozenset()) -> dict[str, Any]:
    params = inspect.signature(fn).parameters.values()
    return {p.name: None if p.default is inspect.Parameter.empty else _plain(p.default)
            for p in params if p.name not in {"self", "ctx"} | drop}


@pytest.mark.parametrize("op", list(READS))
@pytest.mark.parametrize("client", [MemoryService, AsyncMemoryService, MemoryBackend],
                         ids=["MemoryService", "AsyncMemoryService", "MemoryBackend"])
def test_clients_take_the_declared_parameters(op: Operation, client: type) -> None:
    assert signature_of(getattr(client, op)) == {**declared(op), "after": None}


@pytest.mark.parametrize("op", list(READS))
@pytest.mark.parametrize("view", [AsOfView, RoutedView], ids=["AsOfView", "RoutedView"])
def test_views_take_the_declared_parameters_but_time(op: Operation, view: type) -> None:
    wanted = {k: v for k, v in declared(op).items() if k not in AS_OF}
    assert signature_of(getattr(view, op), drop=OUT_OF_VIEW) == wanted


def test_mcp_tools_take_the_declared_parameters() -> None:
    server = build_server(fixed(None))  # type: ignore[arg-type]  # no call is made
    tools = {t.name: t for t in asyncio.run(server.list_tools())}
    for op in READS:
        schema = tools[op].input_schema if hasattr(tools[op], "input_schema") \
            else tools[op].inputSchema
        props = schema["properties"]
        found = {name: _plain(p.get("default")) for name, p in props.items()}
        assert found == {**declared(op), "after": None}, op


def _query_parameters(spec: dict[str, Any], op: str) -> dict[str, Any]:
    operation = spec["paths"][f"/v1/tenants/{{tenant}}/{op}"]["get"]
    return {p["name"]: _plain(p["schema"].get("default")) for p in operation["parameters"]
            if p["in"] == "query"}


def _http_declared(op: Operation) -> dict[str, Any]:
    fields = READS[op].params.model_fields
    return {f.alias or name: value for (name, f), value in
            zip(fields.items(), declared(op).values(), strict=True)} | {"after": None}


def test_http_routes_of_service_and_router_are_the_declaration() -> None:
    service = create_app(lambda: None, keys=ApiKeys(()))  # type: ignore[arg-type, return-value]
    router = router_app(Fanout(lambda: [], [0]), ApiKeys(()))
    for app in (service, router):
        spec = app.openapi()
        for op in READS:
            assert _query_parameters(spec, op) == _http_declared(op), op


def test_a_face_that_drifts_is_caught() -> None:
    def facts(self: object, subject: str | None = None, *, valid: str | None = None,
              known: str | None = None, after: str | None = None,
              limit: int = 5) -> None: ...

    assert signature_of(facts) != {**declared("facts"), "after": None}
