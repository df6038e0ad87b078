"""The HTTP face of the as-of views: a FastAPI app over one stores bundle.

``create_app(stores_provider)`` builds the app without touching the stores (the provider is
called per request), so it can be

- mounted by the live worker, the one process that writes the DuckDB file, with a provider
  returning its open :class:`Stores` (reads run on their own cursors while batches commit), or
- served standalone by ``memstack serve --stores DIR`` over stores no one writes (opened
  read-only; for live stores serve a published snapshot, see docs/queries.md).

Every route is under ``/v1/tenants/{tenant}/`` and needs an API key (``Authorization: Bearer
KEY`` or ``X-API-Key: KEY``) granted that tenant: no or unknown key -> 401, a key of another
tenant -> 403. Routes mirror the CLI: ``facts``, ``history``, ``search``, ``records``,
``context``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from memstack.pipelines.stores.errors import StoreError
from memstack.view.errors import TenantScopeError, ViewError
from memstack.view.keys import ApiKeys
from memstack.view.memory_view import MemoryView
from memstack.view.ops import Query as Q
from memstack.view.ops import execute
from memstack.view.types import (
    Context,
    FactsAnswer,
    HistoryAnswer,
    RecordsAnswer,
    SearchAnswer,
    SearchMode,
)

if TYPE_CHECKING:
    from memstack.pipelines.embedding import Encoder
    from memstack.pipelines.stores.bundle import Stores
    from memstack.view.context import ContextSource

log = logging.getLogger(__name__)

StoresProvider = Callable[[], "Stores"]
"""Returns the open stores to read (called per request; must be cheap)."""

API_VERSION = "1"
_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <key>")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="X-API-Key: <key>")

Tenant = Annotated[str, Path(description="The tenant whose memory is read")]
Valid = Annotated[str | None, Query(description="Valid time (RFC 3339, a date, or now)")]
Known = Annotated[str | None, Query(
    description="Transaction time (RFC 3339 or now) or log position 'partition:next_offset,...'")]
Subject = Annotated[str | None, Query(description="Fact subject")]
Relation = Annotated[str | None, Query(description="Fact relation")]
Session = Annotated[str | None, Query(description="Session id")]


def create_app(stores_provider: StoresProvider, *, keys: ApiKeys | None = None,
               encoder: Encoder | None = None,
               context_sources: Sequence[ContextSource] | None = None) -> FastAPI:
    """The app; ``keys`` default to :meth:`ApiKeys.from_env` (read once, here)."""
    grants = keys if keys is not None else ApiKeys.from_env()
    app = FastAPI(title="memstack", version=API_VERSION,
                  description="As-of-time views over agent memory: what the agent knew, at "
                              "that time, about that time.")
    app.state.encoder = encoder
    app.state.grants = grants
    app.state.stores_provider = stores_provider
    app.state.context_sources = context_sources
    _routes(app)
    _errors(app)
    app.get("/healthz", tags=["service"])(_health)
    return app


def _memory(tenant: Tenant, request: Request,
            bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
            header: Annotated[str | None, Depends(_header)]) -> MemoryView:
    """The tenant's view, once the key is checked: 401 without a known key, 403 off-tenant."""
    state = request.app.state
    key = bearer.credentials if bearer is not None else header
    tenants = None if not key else state.grants.tenants_of(key)
    if tenants is None:
        raise HTTPException(401, "missing or unknown API key",
                            headers={"WWW-Authenticate": "Bearer"})
    if tenant not in tenants:
        log.warning("API key for %s asked for tenant %s", sorted(tenants), tenant)
        raise HTTPException(403, f"this API key is not granted tenant {tenant!r}")
    view = MemoryView(tenant, state.stores_provider(), encoder=state.encoder,
                      context_sources=state.context_sources)
    if state.encoder is None and _needs_encoder(request):
        state.encoder = view.encoder  # loaded once, shared by later requests
    return view


View = Annotated[MemoryView, Depends(_memory)]


def _needs_encoder(request: Request) -> bool:
    return request.url.path.endswith(("/search", "/context"))


def _health() -> dict[str, str]:
    return {"status": "ok"}


def _routes(app: FastAPI) -> None:
    prefix = "/v1/tenants/{tenant}"

    @app.get(f"{prefix}/facts", response_model=FactsAnswer, tags=["query"])
    def facts(view: View, valid: Valid = None, known: Known = None, subject: Subject = None,
              relation: Relation = None) -> Any:
        """Fact values valid at ``valid`` as known at ``known`` (both default to now)."""
        return execute(view, Q("facts", valid, known, subject=subject, relation=relation))

    @app.get(f"{prefix}/history", response_model=HistoryAnswer, tags=["query"])
    def history(view: View, subject: Annotated[str, Query(description="Fact subject")],
                relation: Relation = None, valid: Valid = None, known: Known = None) -> Any:
        """Every version of a subject's facts with both intervals, as the timeline was known."""
        return execute(view, Q("history", valid, known, subject=subject, relation=relation))

    @app.get(f"{prefix}/search", response_model=SearchAnswer, tags=["query"])
    def search(view: View, text: Annotated[str, Query(min_length=1)],
               k: Annotated[int, Query(ge=1, le=1000)] = 10,
               kind: Annotated[list[str] | None, Query()] = None, session: Session = None,
               subject: Subject = None, mode: SearchMode = "hybrid", valid: Valid = None,
               known: Known = None) -> Any:
        """Hybrid search (BM25 + vector, RRF) over the rows that answer as of; with provenance."""
        return execute(view, Q("search", valid, known, subject=subject, text=text, k=k,
                               kinds=tuple(kind or ()), session=session, mode=mode))

    @app.get(f"{prefix}/records", response_model=RecordsAnswer, tags=["query"])
    def records(view: View, session: Session = None,
                start: Annotated[str | None, Query(description="occurred at or after")] = None,
                end: Annotated[str | None, Query(description="occurred before")] = None,
                limit: Annotated[int | None, Query(ge=1)] = None, valid: Valid = None,
                known: Known = None) -> Any:
        """Raw records in log order."""
        return execute(view, Q("records", valid, known, session=session, start=start, end=end,
                               limit=limit))

    @app.get(f"{prefix}/context", response_model=Context, tags=["query"])
    def context(view: View, text: Annotated[str, Query(min_length=1)],
                budget_tokens: Annotated[int, Query(ge=1, le=1_000_000)] = 2000,
                session: Session = None, subject: Subject = None, valid: Valid = None,
                known: Known = None) -> Any:
        """A prompt-ready context under a token budget, with provenance per item."""
        return execute(view, Q("context", valid, known, subject=subject, text=text,
                               session=session, budget_tokens=budget_tokens))


def _errors(app: FastAPI) -> None:
    @app.exception_handler(TenantScopeError)
    def _scope(_: Request, exc: TenantScopeError) -> JSONResponse:
        log.error("tenant scope violation: %s", exc)
        return JSONResponse({"detail": "internal error"}, status_code=500)

    @app.exception_handler(ViewError)
    def _view(_: Request, exc: ViewError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.exception_handler(StoreError)
    def _store(_: Request, exc: StoreError) -> JSONResponse:
        log.error("store error: %s", exc)
        return JSONResponse({"detail": str(exc)}, status_code=503)
