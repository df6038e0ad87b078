"""The router's HTTP API: the read routes of ``memstack serve``, answered over every shard.

Same paths, parameters, keys and answer bodies as the single service (docs/service.md), plus
three fields in every answer: ``partial`` (true when a partition could not be read or its shard
is still catching up after a move), ``missing_partitions`` and ``catching_up``. ``after=TOKEN``
waits until every partition the token names is owned and applied up to it (504 with ``behind``
after ``--after-timeout``). ``GET /v1/shards`` shows who owns what.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, cast

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.concurrency import run_in_threadpool

from memstack.foundation.log_coordinates import InvalidPositionError, Position
from memstack.server.api_keys import ApiKeys, Grant
from memstack.server.deps import (
    MAX_NAME,
    MAX_RECORDS,
    MAX_TOKEN,
    After,
    Known,
    Relation,
    Session,
    Subject,
    Tenant,
    Text,
    Valid,
    authorized,
)
from memstack.server.problems import install_problem_handlers
from memstack.server.router.fanout import Coverage, Fanout, ShardsBehindError
from memstack.server.router.view import RoutedMemory
from memstack.view.memory_view import MemoryView
from memstack.view.ops import Query as Q
from memstack.view.ops import execute, to_json
from memstack.view.types import SearchMode

Read = Annotated[Grant, Depends(authorized("read"))]


def router_app(fanout: Fanout, keys: ApiKeys, *, after_timeout_s: float = 30.0) -> FastAPI:
    app = FastAPI(title="memstack router", description=__doc__)
    app.state.grants = keys

    def coverage(after: str | None) -> Coverage | None:
        if not after:
            return None
        try:
            wanted = Position.parse(after)
        except InvalidPositionError as exc:
            raise HTTPException(422, f"after: {exc}") from exc
        try:
            return fanout.wait(wanted, after_timeout_s)
        except ShardsBehindError as exc:
            raise HTTPException(504, {"message": str(exc), "behind": exc.behind,
                                      "missing_partitions": exc.missing}) from exc

    def answer(tenant: str, query: Q, after: str | None) -> dict[str, Any]:
        memory = RoutedMemory(tenant, fanout, coverage(after))
        body = to_json(execute(cast(MemoryView, memory), query))
        body.update(partial=memory.partial, missing_partitions=sorted(memory.missing),
                    catching_up=sorted(memory.catching_up))
        return body

    async def run(tenant: str, query: Q, after: str | None) -> dict[str, Any]:
        return await run_in_threadpool(answer, tenant, query, after)

    _query_routes(app, run)
    _service_routes(app, fanout)

    install_problem_handlers(app)  # the service's error shape (docs/service.md)
    return app


Run = Callable[[str, Q, str | None], Awaitable[dict[str, Any]]]


def _query_routes(app: FastAPI, run: Run) -> None:
    prefix = "/v1/tenants/{tenant}"

    @app.get(f"{prefix}/facts", tags=["query"])
    async def facts(tenant: Tenant, _g: Read, valid: Valid = None, known: Known = None,
                    subject: Subject = None, relation: Relation = None,
                    after: After = None) -> Any:
        return await run(tenant, Q("facts", valid, known, subject=subject, relation=relation),
                         after)

    @app.get(f"{prefix}/history", tags=["query"])
    async def history(tenant: Tenant, _g: Read,
                      subject: Annotated[str, Query(description="Fact subject",
                                                    max_length=MAX_NAME)],
                      relation: Relation = None, valid: Valid = None, known: Known = None,
                      after: After = None) -> Any:
        return await run(tenant, Q("history", valid, known, subject=subject,
                                   relation=relation), after)

    @app.get(f"{prefix}/search", tags=["query"])
    async def search(tenant: Tenant, _g: Read, text: Text,
                     k: Annotated[int, Query(ge=1, le=1000)] = 10,
                     kind: Annotated[list[str] | None, Query(max_length=16)] = None,
                     session: Session = None,
                     subject: Subject = None, mode: SearchMode = "hybrid", valid: Valid = None,
                     known: Known = None, after: After = None) -> Any:
        return await run(tenant, Q("search", valid, known, subject=subject, text=text, k=k,
                                   kinds=tuple(kind or ()), session=session, mode=mode), after)

    @app.get(f"{prefix}/records", tags=["query"])
    async def records(tenant: Tenant, _g: Read, session: Session = None,
                      start: Annotated[str | None, Query(max_length=MAX_TOKEN)] = None,
                      end: Annotated[str | None, Query(max_length=MAX_TOKEN)] = None,
                      limit: Annotated[int | None, Query(ge=1, le=MAX_RECORDS)] = None,
                      valid: Valid = None,
                      known: Known = None, after: After = None) -> Any:
        return await run(tenant, Q("records", valid, known, session=session, start=start,
                                   end=end, limit=limit), after)

    @app.get(f"{prefix}/context", tags=["query"])
    async def context(tenant: Tenant, _g: Read, text: Text,
                      budget_tokens: Annotated[int, Query(ge=1, le=1_000_000)] = 2000,
                      session: Session = None, subject: Subject = None, valid: Valid = None,
                      known: Known = None, after: After = None) -> Any:
        return await run(tenant, Q("context", valid, known, subject=subject, text=text,
                                   session=session, budget_tokens=budget_tokens), after)



def _service_routes(app: FastAPI, fanout: Fanout) -> None:
    @app.get("/v1/shards", tags=["service"])
    def shards() -> dict[str, Any]:
        found = fanout.coverage()
        return {"partitions": list(found.partitions),
                "owners": {str(p): u for p, u in sorted(found.owners.items())},
                "applied": {str(p): o for p, o in sorted(found.applied.items())},
                "missing_partitions": sorted(found.missing),
                "catching_up": sorted(found.catching_up)}

    @app.get("/healthz", tags=["service"])
    def health() -> dict[str, Any]:
        found = fanout.coverage()
        applied = Position({p: o for p, o in found.applied.items()})
        return {"status": "partial" if found.missing or found.catching_up else "ok",
                "applied": applied.token, "missing_partitions": sorted(found.missing)}
