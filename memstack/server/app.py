"""The HTTP face of the as-of views: a FastAPI app over one stores bundle.

``create_app(stores_provider)`` builds the app without touching the stores (the provider is
called per request), so it can be

- mounted by the live worker, the one process that writes the DuckDB file, with a provider
  returning its open :class:`Stores` (reads run on their own cursors while batches commit), or
- served standalone by ``memstack serve --read-only --stores DIR`` over stores no one writes.

``memstack serve`` passes a :class:`LiveService` (``service=``; a reader process of ``memstack
serve --readers N`` passes its view of the published snapshots, and ``write_routes=False``:
it forwards those to the writer, ``memstack.server.forward``): then the read routes accept
``after=<position token>`` and wait for the stores to apply it, reads hold the stores' gate
shared (a forget takes it alone), and the write, forget and change-feed routes are added
(``memstack.server.routes``).

Every route is under ``/v1/tenants/{tenant}/`` and needs an API key (``Authorization: Bearer
KEY`` or ``X-API-Key: KEY``) granted that tenant and the route's role (read, write, forget):
no or unknown key -> 401, another tenant or a missing role -> 403. Read routes mirror the CLI:
``facts``, ``history``, ``search``, ``records``, ``context``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from memstack.server.api_keys import ApiKeys
from memstack.server.body_limit import DEFAULT_MAX_BYTES, BodyLimit
from memstack.server.contract import publish
from memstack.server.point_reads import PointReads
from memstack.server.problems import install_problem_handlers, problem_responses

if TYPE_CHECKING:
    from memstack.pipelines.embedding import Encoder
    from memstack.pipelines.service.parts import ReadSide
    from memstack.pipelines.stores.bundle import Stores
    from memstack.view.context import ContextSource

log = logging.getLogger(__name__)

StoresProvider = Callable[[], "Stores"]
"""Returns the open stores to read (called per request; must be cheap)."""

API_VERSION = "1"

READ_ERRORS = problem_responses(401, 403, 422, 500, 503, 504)
"""What a read route may answer besides 200, each a problem document (docs/service.md)."""


def create_app(stores_provider: StoresProvider, *, keys: ApiKeys | None = None,
               encoder: Encoder | None = None,
               context_sources: Sequence[ContextSource] | None = None,
               service: ReadSide | None = None, mcp_host: str = "127.0.0.1",
               write_routes: bool = True) -> FastAPI:
    """The app; ``keys`` default to :meth:`ApiKeys.from_env` (read once, here).

    The MCP server is mounted at ``/mcp`` (docs/mcp.md); ``mcp_host`` is the host the service
    listens on (loopback hosts get the SDK's DNS-rebinding protection).
    """
    grants = keys if keys is not None else ApiKeys.from_env()
    app = FastAPI(title="memstack", version=API_VERSION,
                  description="Agent memory as one live service: write events, read them back "
                              "as of any time (after= your own writes), forget, follow changes.")
    app.state.encoder = encoder
    app.state.grants = grants
    app.state.stores_provider = stores_provider
    app.state.context_sources = context_sources
    app.state.service = service
    _routes(app)
    if service is not None and write_routes:
        from memstack.server.routes import add_service_routes

        add_service_routes(app)
    install_problem_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=service.limits.max_bytes if service is not None
                       else DEFAULT_MAX_BYTES)
    app.add_middleware(PointReads)  # held subjects' facts and provenances, as bytes
    app.get("/healthz", tags=["service"], responses=PROBE_RESPONSES)(_health)
    app.get("/readyz", tags=["service"], responses=PROBE_RESPONSES)(_ready)
    _mount_inspector(app)
    _mount_mcp(app, grants, mcp_host)
    publish(app)
    return app


def _mount_inspector(app: FastAPI) -> None:
    """The memory inspector at ``/ui`` and its read routes (docs/inspector.md)."""
    from memstack.server.inspector import add_inspector

    add_inspector(app)


def _mount_mcp(app: FastAPI, grants: ApiKeys, host: str) -> None:
    """MCP over streamable HTTP at ``/mcp``; the tenant comes from the request's API key."""
    from memstack.mcp.http import mount_mcp

    mount_mcp(app, grants.tenants_of, host=host)


PROBE_RESPONSES: dict[int | str, dict[str, Any]] = {503: {
    "description": "Failing (/healthz: acknowledged writes not applied, the partitions named with "
                   "their lag) or not ready (/readyz: starting, behind or draining). A probe "
                   "answers its report, not a problem document, so the load balancer's log and "
                   "the operator read the same fields as on 200.",
    "content": {"application/json": {"schema": {
        "type": "object", "required": ["status"],
        "properties": {"status": {"type": "string"}}}}}}}
"""The health probes' non-200 answer, as the OpenAPI publishes it."""


def _health(request: Request) -> JSONResponse:
    """Liveness: 200 ``ok``, or 503 ``failing`` when the service acknowledges writes it cannot
    apply (the body names the partitions, their offsets and the lag); cheap, in memory."""
    service: ReadSide | None = request.app.state.service
    if service is None:
        return JSONResponse({"status": "ok"})
    body: dict[str, Any] = {"status": "ok"}
    if service.health is not None:
        body = service.health.report().healthz()
    body["applied"] = service.watch.applied().token
    body["sealing"] = "off" if service.sealing_warning else "on"
    if service.sealing_warning:  # reported, not failing: the deployment chose it
        body["warnings"] = [service.sealing_warning]
    return JSONResponse(body, status_code=503 if body["status"] != "ok" else 200)


def _ready(request: Request) -> JSONResponse:
    """Readiness for load balancers: 200 only when started, caught up enough and not
    draining; 503 otherwise, with the reasons."""
    service: ReadSide | None = request.app.state.service
    if service is None or service.health is None:
        return JSONResponse({"status": "ready"})
    body = service.health.report().readyz()
    body["applied"] = service.watch.applied().token
    return JSONResponse(body, status_code=200 if body["status"] == "ready" else 503)


def _routes(app: FastAPI) -> None:
    from memstack.server.deps import reader
    from memstack.server.read_routes import add_read_routes

    add_read_routes(app, reader, typed_answers=True, responses=READ_ERRORS)
