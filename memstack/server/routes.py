"""The live service's write side: events, forgets, forget status and the change feed.

``POST /v1/tenants/{tenant}/events`` (role write), ``POST .../forget`` (role forget),
``GET .../forget/{request_id}`` and ``GET .../changes`` (role read). See docs/service.md.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from memstack.foundation.log_coordinates import InvalidPositionError, Position, WrittenOut
from memstack.pipelines.service.parts import LiveService
from memstack.pipelines.service.writes import parse_events
from memstack.server.api_keys import Grant
from memstack.server.deps import Tenant, authorized
from memstack.server.problems import ProblemError, invalid, problem_responses
from memstack.view.reads import MAX_NAME, MAX_TOKEN

log = logging.getLogger(__name__)


class WriteAnswer(BaseModel):
    written: list[WrittenOut]
    position: str = Field(description="Pass as after= to read these writes")


def _write(service: LiveService, body: bytes, tenant: str, state: Any) -> Response:
    """A write's events validated, produced and acknowledged, and its answer's JSON, in a
    worker thread: validating a request of events holds the interpreter for milliseconds
    (hundreds under load: 64 events measured at up to 0.36 s of wall time on 2 busy cores),
    and on the event loop every other request (a facts read on the point-read lane) waited
    behind it. The events' kinds go to the request's ``state`` for the write's span."""
    events = parse_events(body, tenant, service.limits)
    state.memstack_kinds = [str(e.kind) for e in events]
    written = service.writer.write(events)
    answer = WriteAnswer(written=[WrittenOut.of(w) for w in written],
                         position=Position.after_events(written).token)
    return Response(answer.model_dump_json(), media_type="application/json")


class ForgetBody(BaseModel):
    scope: dict[str, Any] = Field(description="{\"type\": \"event|session|subject|tenant|"
                                              "fact\", ...} as in schemas/event.v1.json")
    reason: str | None = None


class ForgetAnswer(BaseModel):
    request_id: str
    position: str = Field(description="Pass as after=: reads then never return the content")
    warnings: list[str] = Field(default_factory=list, description=(
        "What this forget cannot erase: 'log not erased: sealing is off' when the deployment "
        "writes payloads unsealed (MEMSTACK_SEAL=0); empty when sealed"))


class ForgetStatus(BaseModel):
    request_id: str
    status: str = Field(description="logged, invisible (no read returns the content), erased "
                                    "(bytes removed from every store) or audited")
    scope: str | None = None
    phases: dict[str, str] | None = Field(None, description="when each phase was reached "
                                                           "(ISO 8601, UTC)")
    phase_seconds: dict[str, float] | None = Field(
        None, description="per phase reached, seconds after the request was logged")
    audit: dict[str, Any] | None = Field(None, description="per-store counts and the audit")


def _service(request: Request) -> LiveService:
    service: LiveService = request.app.state.service
    return service


async def _body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ProblemError(413, f"the body has {declared} bytes; the limit is {limit} (split "
                                "the events into requests)", field="body")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ProblemError(413, f"the body passed the limit of {limit} bytes (split the "
                                    "events into requests)", field="body")
        chunks.append(chunk)
    return b"".join(chunks)


def _require_json(request: Request) -> None:
    """415 unless the body is declared ``application/json`` (a charset, if given, UTF-8)."""
    declared = request.headers.get("content-type", "")
    media, _, params = declared.partition(";")
    charset = params.strip().lower().removeprefix("charset=").strip('"')
    if media.strip().lower() != "application/json" or (params.strip() and charset not in (
            "utf-8", "utf8")):
        raise ProblemError(415, f"the body is {declared[:80]!r}; send the events as "
                                "Content-Type: application/json (UTF-8)",
                           field="content-type")


def add_service_routes(app: FastAPI) -> None:
    prefix = "/v1/tenants/{tenant}"

    # The body is read raw (its size is limited as it streams); memstack.server.contract
    # publishes its schema, the event envelope of schemas/event.v1.json.
    @app.post(f"{prefix}/events", response_model=WriteAnswer, tags=["write"],
              responses=problem_responses(401, 403, 409, 413, 415, 422, 500, 503))
    async def write_events(tenant: Tenant, request: Request,
                           _grant: Annotated[Grant, Depends(authorized("write"))]) -> Any:
        """Write events (the JSON of schemas/event.v1.json); answers once the broker
        acknowledged every one. All-or-nothing validation; retries are idempotent by id."""
        service = _service(request)
        _require_json(request)
        body = await _body(request, service.limits.max_bytes)
        return await run_in_threadpool(_write, service, body, tenant, request.state)

    @app.post(f"{prefix}/forget", response_model=ForgetAnswer, tags=["write"],
              responses=problem_responses(400, 401, 403, 413, 422, 500, 503))  # 413: BodyLimit
    async def forget(tenant: Tenant, body: ForgetBody, request: Request,
                     _grant: Annotated[Grant, Depends(authorized("forget"))]) -> Any:
        """Log a forget request; ``after=`` its position, no read returns the content."""
        return await run_in_threadpool(_service(request).forgets.request, tenant,
                                       body.model_dump())

    @app.get(f"{prefix}/forget/{{request_id}}", response_model=ForgetStatus, tags=["write"],
             responses=problem_responses(401, 403, 404, 422, 500))
    def forget_status(tenant: Tenant,
                      request_id: Annotated[str, Path(max_length=MAX_NAME)], request: Request,
                      _grant: Annotated[Grant, Depends(authorized("read"))]) -> Any:
        """A forget request's status (logged, invisible, erased, audited), when each phase was
        reached, and its per-store audit."""
        status = _service(request).forgets.status(tenant, request_id)
        if status is None:
            raise ProblemError(404, f"tenant {tenant!r} has no forget request {request_id!r}",
                               field="request_id")
        return status

    @app.get(f"{prefix}/changes", tags=["feed"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}}},
                        **problem_responses(401, 403, 410, 422, 500)})
    async def changes(tenant: Tenant, request: Request,
                      _grant: Annotated[Grant, Depends(authorized("read"))],
                      from_: Annotated[str | None, Query(alias="from", description=(
                          "a position token (a change's id): changes after it; default: "
                          "from now on"), max_length=MAX_TOKEN)] = None) -> StreamingResponse:
        """Server-sent events: each committed change of the tenant (memory_added,
        fact_version_opened, fact_version_closed, forgotten); the event id is a position."""
        feed = _service(request).feed
        token = from_ or request.headers.get("last-event-id")
        try:
            since = Position.parse(token) if token else None
        except InvalidPositionError as exc:
            raise invalid("from", str(exc)) from exc
        if since is not None:
            feed.check_from(since)  # FeedGoneError: 410
        return StreamingResponse(feed.follow(tenant, since), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

