"""The router's HTTP API: the read routes of ``memstack serve``, answered over every shard.

Same paths, parameters, keys and answer bodies as the single service (docs/service.md), plus
three fields in every answer: ``partial`` (true when a partition could not be read or its shard
is still catching up after a move), ``missing_partitions`` and ``catching_up``. ``after=TOKEN``
waits until every partition the token names is owned and applied up to it (504 with ``behind``
after ``--after-timeout``). ``GET /v1/shards`` shows who owns what.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, cast

from fastapi import Depends, FastAPI, HTTPException
from fastapi.concurrency import run_in_threadpool

from memstack.foundation.log_coordinates import InvalidPositionError, Position
from memstack.server.api_keys import ApiKeys, Grant
from memstack.server.deps import After, Tenant, authorized
from memstack.server.problems import install_problem_handlers
from memstack.server.read_routes import add_read_routes
from memstack.server.router.fanout import Coverage, Fanout, ShardsBehindError
from memstack.server.router.view import RoutedMemory
from memstack.view.memory_view import MemoryView
from memstack.view.ops import Query as Q
from memstack.view.ops import execute, to_json

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

    async def routed(tenant: Tenant, _grant: Read, after: After = None) -> _Routed:
        coverage_now = await run_in_threadpool(coverage, after)
        return _Routed(tenant, fanout, coverage_now)

    add_read_routes(app, routed, typed_answers=False)
    _service_routes(app, fanout)

    install_problem_handlers(app)  # the service's error shape (docs/service.md)
    return app


@dataclass(frozen=True)
class _Routed:
    """One tenant's reads over every shard, with what the answer could not cover."""

    tenant: str
    fanout: Fanout
    coverage: Coverage | None

    def run(self, query: Q) -> dict[str, Any]:
        memory = RoutedMemory(self.tenant, self.fanout, self.coverage)
        body = to_json(execute(cast(MemoryView, memory), query))
        body.update(partial=memory.partial, missing_partitions=sorted(memory.missing),
                    catching_up=sorted(memory.catching_up))
        return body


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
