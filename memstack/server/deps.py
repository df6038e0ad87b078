"""The HTTP service's dependencies: path and query parameters, API-key authorization (401 /
403), waiting for ``after=`` (422 / 504), and one tenant's reader under the stores gate.

Shared by the read routes (:mod:`memstack.server.app`), the write, forget and feed routes
(:mod:`memstack.server.routes`), the inspector and the shard router, so that each
is declared once and none of them imports the app that mounts it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, HTTPException, Path, Query, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from memstack.foundation.log_coordinates import InvalidPositionError, Position
from memstack.server.api_keys import Grant
from memstack.server.problems import invalid
from memstack.view.memory_view import MemoryView
from memstack.view.ops import Query as Q
from memstack.view.ops import execute
from memstack.view.reads import MAX_NAME, MAX_TEXT, MAX_TOKEN, READS

if TYPE_CHECKING:
    from memstack.pipelines.service.parts import ReadSide

log = logging.getLogger(__name__)

_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <key>")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="X-API-Key: <key>")


Tenant = Annotated[str, Path(description="The tenant whose memory is read",
                             max_length=MAX_NAME)]
Valid = Annotated[str | None, Query(description="Valid time (RFC 3339, a date, or now)",
                                    max_length=MAX_TOKEN)]
Known = Annotated[str | None, Query(
    description="Transaction time (RFC 3339 or now) or log position 'partition:next_offset,...'",
    max_length=MAX_TOKEN)]
After = Annotated[str | None, Query(
    description="A position token a write or forget returned: answer once the stores applied "
                "it (504 when they do not within the service's timeout; 422 when it names a "
                "partition the topics do not have)", max_length=MAX_TOKEN)]
Subject = Annotated[str | None, Query(description="Fact subject", max_length=MAX_NAME)]
Relation = Annotated[str | None, Query(description="Fact relation", max_length=MAX_NAME)]
Session = Annotated[str | None, Query(description="Session id", max_length=MAX_NAME)]
Text = Annotated[str, Query(min_length=1, max_length=MAX_TEXT)]


def authorized(role: str) -> Callable[..., Awaitable[Grant]]:
    """A dependency: the key's grant, once it is known (401), granted the path's tenant and
    ``role`` (403 naming what is missing)."""

    # async: a hash and a dict look-up, cheaper on the loop than a hop to the threadpool
    async def check(tenant: Tenant, request: Request,
                    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
                    header: Annotated[str | None, Depends(_header)]) -> Grant:
        key = bearer.credentials if bearer is not None else header
        grant: Grant | None = None if not key else request.app.state.grants.grant_of(key)
        if grant is None:
            raise HTTPException(401, "missing or unknown API key",
                                headers={"WWW-Authenticate": "Bearer"})
        if tenant not in grant.tenants:
            log.warning("API key for %s asked for tenant %s", sorted(grant.tenants), tenant)
            raise HTTPException(403, f"this API key is not granted tenant {tenant!r}")
        if role not in grant.roles:
            raise HTTPException(403, f"this API key lacks the {role!r} role (it has "
                                     f"{sorted(grant.roles)}); create one with `memstack keys "
                                     f"add --tenant {tenant} --role {role}`")
        return grant

    return check


async def caught_up(request: Request, after: After = None) -> Position | None:
    """A dependency: wait until the stores applied ``after`` (422 malformed, 504 too slow)."""
    if not after:
        return None
    service: ReadSide | None = request.app.state.service
    if service is None:
        raise invalid("after", "needs the live service (`memstack serve`); this server reads "
                               "stores no one writes")
    try:
        wanted = Position.parse(after)
    except InvalidPositionError as exc:
        raise invalid("after", str(exc)) from exc
    return await service.watch.wait(wanted, service.after_timeout_s)  # 504: StoresBehindError


@dataclass(frozen=True)
class Reader:
    """One tenant's reads: each query opens a view on the current stores under the gate."""

    tenant: str
    request: Request

    def run(self, query: Q) -> Any:
        heavy = READS[query.op].heavy
        return self.call(lambda view: execute(view, query), heavy=heavy)

    def call(self, read: Callable[[MemoryView], Any], *, heavy: bool = False) -> Any:
        """``read(view)`` under the stores gate (``heavy``: counts as a search)."""
        state = self.request.app.state
        service: ReadSide | None = state.service
        gate: AbstractContextManager[None] = (service.gate.reading(heavy)
                                              if service is not None else nullcontext())
        with gate:
            view = MemoryView(self.tenant, state.stores_provider(), encoder=state.encoder,
                              context_sources=state.context_sources)
            answer = read(view)
            if state.encoder is None and heavy:
                state.encoder = view.encoder  # loaded once, shared by later requests
            return answer


async def reader(tenant: Tenant, request: Request,
                 _grant: Annotated[Grant, Depends(authorized("read"))],
                 _after: Annotated[Position | None, Depends(caught_up)]) -> Reader:
    """A dependency: the tenant's reader, once the key may read it and ``after=`` is applied."""
    return Reader(tenant, request)


View = Annotated[Reader, Depends(reader)]
