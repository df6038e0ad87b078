"""The MCP server over streamable HTTP: standalone, or mounted at ``/mcp`` on the service.

:func:`mount_mcp` adds the route to the service's own app: each request's API key (``Bearer``
or ``X-API-Key``) must be known (401 otherwise), and the key decides the tenant (its only one,
or the one named by ``X-Memstack-Tenant`` among those it is granted). Tool calls then go to the
service's own routes in-process (``httpx.ASGITransport``) with the caller's key, so roles,
tenant checks, validation and ``after=`` are exactly those of the HTTP API.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager

import httpx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memstack.mcp.backend import BackendResolver, MemoryBackend, api_key_of
from memstack.mcp.tools import build_server
from memstack.service.client import AsyncMemoryService

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
            endpoint = McpEndpoint(route.app, tenants_of, server.session_manager.run)
            app.router.routes.append(Route(route.path, endpoint=endpoint, methods=None))


def tenant_for(key: str | None, headers: Mapping[str, str] | None,
               tenants_of: TenantsOf) -> str:
    """The one tenant a call works on: from the key's grants, never from a tool argument."""
    granted = tenants_of(key) if key else None
    if not granted:
        raise ToolError(UNAUTHORIZED)
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


UNAUTHORIZED = ("unauthorized: missing or unknown API key; send Authorization: Bearer KEY "
                "(or X-API-Key) with a key `memstack keys add` made")
UNAUTHORIZED_CODE = -32001
"""The JSON-RPC error code of a refused key (server-defined range)."""


def unauthorized(request_id: object) -> JSONResponse:
    """401 as a JSON-RPC error the SDK clients show as is (they read a JSON-RPC error body at
    any status; a bare 401 surfaces as -32603 "Server returned an error response"). Its
    ``data`` is the service's problem document."""
    problem = {"type": "urn:memstack:problem:unauthorized", "title": "Unauthorized",
               "status": 401, "detail": UNAUTHORIZED.removeprefix("unauthorized: ")}
    return JSONResponse({"jsonrpc": "2.0", "id": request_id,
                         "error": {"code": UNAUTHORIZED_CODE, "message": UNAUTHORIZED,
                                   "data": problem}},
                        status_code=401, headers={"WWW-Authenticate": "Bearer"})


async def _request_id(receive: Receive, limit: int = 1 << 20) -> object:
    """The JSON-RPC id of the request's body (None when it has none or is not JSON-RPC)."""
    chunks: list[bytes] = []
    size, more = 0, True
    while more and size <= limit:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        more = message.get("more_body", False)
    try:
        body = json.loads(b"".join(chunks)) if size <= limit else None
    except (ValueError, RecursionError):
        return None
    request_id = body.get("id") if isinstance(body, dict) else None
    return request_id if isinstance(request_id, (str, int)) else None


class McpEndpoint:
    """The MCP route: 401 before any MCP exchange without a known API key; the SDK's session
    manager started on first use and kept for the life of the event loop (so the mount works
    whether or not the host runs the ASGI lifespan; ``memstack serve`` does not)."""

    def __init__(self, app: ASGIApp, tenants_of: TenantsOf,
                 run: Callable[[], AbstractAsyncContextManager[None]]) -> None:
        self.app = app
        self.tenants_of = tenants_of
        self._run = run
        self._holder: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            key = api_key_of(headers)
            if not key or not self.tenants_of(key):
                await unauthorized(await _request_id(receive))(scope, receive, send)
                return
        await self._started()
        await self.app(scope, receive, send)

    async def _started(self) -> None:
        if self._holder is None:  # no await since the check: one holder per endpoint
            self._holder = asyncio.create_task(self._hold(), name="memstack-mcp-sessions")
        ready = asyncio.create_task(self._ready.wait())
        await asyncio.wait({self._holder, ready}, return_when=asyncio.FIRST_COMPLETED)
        if not self._ready.is_set():
            ready.cancel()
            self._holder.result()  # raises what stopped the session manager
            raise RuntimeError("the MCP session manager stopped")

    async def _hold(self) -> None:
        async with self._run():
            self._ready.set()
            await asyncio.Event().wait()  # until the loop cancels it at shutdown
