"""The MCP server over streamable HTTP: standalone, or mounted at ``/mcp`` on the service.

:func:`mount_mcp` adds the route to the service's own app: each request's API key (``Bearer``
or ``X-API-Key``) must be known (401 otherwise), and the key decides the tenant (its only one,
or the one named by ``X-Memstack-Tenant`` among those it is granted). Tool calls then go to the
service's own routes in-process (``httpx.ASGITransport``) with the caller's key, so roles,
tenant checks, validation and ``after=`` are exactly those of the HTTP API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memstack.mcp.backend import BackendResolver, MemoryBackend, api_key_of
from memstack.mcp.tools import build_server
from memstack.service_client import AsyncMemoryService

TENANT_HEADER = "x-memstack-tenant"
TenantsOf = Callable[[str], "frozenset[str] | None"]
"""The tenants an API key is granted, or None for an unknown key (the service's key check)."""


def streamable_http_app(resolve: BackendResolver, *, path: str = "/mcp",
                        host: str = "127.0.0.1") -> Starlette:
    """A standalone ASGI app serving the MCP server at ``path`` (stateless, JSON answers)."""
    return _server_app(build_server(resolve), path, host)


def _server_app(server: MCPServer, path: str, host: str) -> Starlette:
    return server.streamable_http_app(streamable_http_path=path, stateless_http=True,
                                      json_response=True, host=host)


def mount_mcp(app: Starlette, tenants_of: TenantsOf, *, path: str = "/mcp",
              host: str = "127.0.0.1") -> None:
    """Serve the MCP server at ``path`` on ``app``, calling ``app``'s own routes per tool."""
    backends: dict[tuple[str, str], MemoryBackend] = {}

    def resolve(headers: Mapping[str, str] | None) -> MemoryBackend:
        key = api_key_of(headers)
        tenant = tenant_for(key, headers, tenants_of)
        cache_key = (key or "", tenant)
        if cache_key not in backends:
            backends[cache_key] = AsyncMemoryService(
                "http://memstack.in-process", key, tenant=tenant, source="memstack-mcp",
                transport=httpx.ASGITransport(app=app))
        return backends[cache_key]

    server = build_server(resolve)
    inner = _server_app(server, path, host)
    for route in inner.routes:
        if isinstance(route, Route):
            app.router.routes.append(Route(route.path, endpoint=KeyCheck(route.app, tenants_of),
                                           methods=None))
    _run_with(app, server.session_manager.run)


def tenant_for(key: str | None, headers: Mapping[str, str] | None,
               tenants_of: TenantsOf) -> str:
    """The one tenant a call works on: from the key's grants, never from a tool argument."""
    granted = tenants_of(key) if key else None
    if not granted:
        raise ToolError("missing or unknown API key: send Authorization: Bearer KEY")
    lower = {k.lower(): v for k, v in (headers or {}).items()}
    named = lower.get(TENANT_HEADER)
    if named is not None:
        if named not in granted:
            raise ToolError(f"this API key is not granted tenant {named!r}")
        return named
    if len(granted) > 1:
        raise ToolError(f"this API key is granted {len(granted)} tenants; name one with the "
                        "X-Memstack-Tenant header")
    return next(iter(granted))


class KeyCheck:
    """401 before any MCP exchange when the request carries no known API key."""

    def __init__(self, app: ASGIApp, tenants_of: TenantsOf) -> None:
        self.app = app
        self.tenants_of = tenants_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            key = api_key_of(headers)
            if not key or not self.tenants_of(key):
                answer = JSONResponse({"detail": "missing or unknown API key"}, status_code=401,
                                      headers={"WWW-Authenticate": "Bearer"})
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _run_with(app: Starlette,
              run: Callable[[], AbstractAsyncContextManager[None]]) -> None:
    """Run ``run()`` (the MCP session manager) for as long as the app's lifespan."""
    previous = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(parent: Any) -> AsyncIterator[Any]:
        async with run(), previous(parent) as state:
            yield state

    app.router.lifespan_context = lifespan
