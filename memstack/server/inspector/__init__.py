"""The memory inspector: a browser page at ``/ui`` and the read routes it needs.

The page (``static/index.html``, ``inspector.js``, ``inspector.css``, shipped as package
data; no build step, no CDN, works offline) talks to the same HTTP API as any client, with the API
key the user types in. :func:`add_inspector` mounts it and adds three read routes the other
clients may use too:

- ``GET /v1/key``: the presented key's tenants and roles (which actions the page offers);
- ``GET /v1/tenants/{tenant}/subjects``: the tenant's subjects and its known-time range;
- ``GET /v1/tenants/{tenant}/events/{event_id}``: an event's provenance and lineage;
- ``GET /v1/tenants/{tenant}/sessions/{session}/state``: what a session's recurrent state holds
  and its size in bytes (a service whose worker keeps session state).

See docs/inspector.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.responses import RedirectResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.server.deps import View
from memstack.server.problems import ProblemError, problem_responses
from memstack.view.catalog import Provenance, SubjectsAnswer, provenance, subjects
from memstack.view.memory_view import MemoryView
from memstack.view.points import points_of
from memstack.view.reads import MAX_NAME
from memstack.view.state import SessionStateInfo, state_info

ASSETS = Path(__file__).parent / "static"
"""The folder of the page's static files."""

_bearer = HTTPBearer(auto_error=False)
_header = APIKeyHeader(name="X-API-Key", auto_error=False)


class KeyAnswer(BaseModel):
    tenants: list[str]
    roles: list[str]


def add_inspector(app: FastAPI) -> None:
    """Mount the page at ``/ui`` and add its read routes."""
    prefix = "/v1/tenants/{tenant}"

    @app.get("/v1/key", response_model=KeyAnswer, tags=["query"],
             responses=problem_responses(401, 500))
    def key(request: Request,
            bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
            header: Annotated[str | None, Depends(_header)]) -> Any:
        """The tenants and roles granted to the presented API key (401 when unknown)."""
        presented = bearer.credentials if bearer is not None else header
        grant = None if not presented else request.app.state.grants.grant_of(presented)
        if grant is None:
            raise HTTPException(401, "missing or unknown API key",
                                headers={"WWW-Authenticate": "Bearer"})
        return {"tenants": sorted(grant.tenants), "roles": sorted(grant.roles)}

    @app.get(f"{prefix}/subjects", response_model=SubjectsAnswer, tags=["query"],
             responses=problem_responses(401, 403, 422, 500, 503, 504))
    def tenant_subjects(view: View) -> Any:
        """The tenant's subjects (facts and records about them, when they were learnt) and
        its known-time range: the first and last transaction time of any fact or record."""
        return view.call(lambda memory: subjects(memory.stores.events, memory.tenant))

    @app.get(f"{prefix}/events/{{event_id}}", response_model=Provenance, tags=["query"],
             responses=problem_responses(401, 403, 404, 422, 500, 503, 504))
    def event_provenance(view: View,
                         event_id: Annotated[str, PathParam(max_length=MAX_NAME)]) -> Any:
        """An event as the stores hold it (record or fact entry, partition, offset, log
        time) and its lineage: fact versions it opened, closed and asserted, its memory row."""
        found = view.call(lambda memory: _provenance(memory, event_id))
        if found is None:
            raise ProblemError(404, f"tenant {view.tenant!r} has no stored event {event_id!r} "
                                    "(never written, not applied yet, or forgotten)",
                               field="event_id")
        return found

    @app.get(f"{prefix}/sessions/{{session}}/state", response_model=SessionStateInfo,
             tags=["query"], responses=problem_responses(401, 403, 404, 422, 500, 503, 504))
    def session_state(view: View, request: Request,
                      session: Annotated[str, PathParam(max_length=MAX_NAME)]) -> Any:
        """What the session's recurrent state holds (items per head, the turns of its code
        ring) and its size in bytes, as the worker keeps it now."""
        service = request.app.state.service
        snapshot = None if service is None else service.session_state
        if snapshot is None:
            raise ProblemError(404, "this service keeps no session state (a worker without "
                                    "the commit path)", field="session")
        data = snapshot(view.tenant, session)
        if data is None:
            raise ProblemError(404, f"tenant {view.tenant!r} has no state for session "
                                    f"{session!r} (no event yet, or every item forgotten)",
                               field="session")
        return state_info(view.tenant, session, data)

    @app.get("/ui", include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    app.mount("/ui", StaticFiles(directory=ASSETS, html=True), name="inspector")


def _provenance(memory: MemoryView, event_id: str) -> Provenance | None:
    """The event's provenance; through the key index, which keeps it for the point-read lane
    (``memstack.server.point_reads``), when the stores are DuckDB's."""
    events = memory.stores.events
    if isinstance(events, DuckDBEventIndex):
        return points_of(events).provenance(memory.stores, memory.tenant, event_id)
    return provenance(memory.stores, memory.tenant, event_id)
