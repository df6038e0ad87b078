"""The point-read lane: a held subject's facts and a held event's provenance, answered as bytes
before the web framework runs.

``GET /v1/tenants/{tenant}/facts?subject=...`` and ``GET /v1/tenants/{tenant}/events/{id}``
are what an agent asks on every turn. When the key index (:mod:`memstack.view.points`) holds
the subject (or the provenance), the answer is a join of JSON bytes made once per version, and
the cost of a read is the HTTP parse, the key check and the as-of rule over a few versions:
no dependency injection, no parameter model, no thread hop, no response model.

The lane answers only requests it can answer exactly as the routes do, and hands every other
request to the app unchanged: anything it does not recognise (another parameter, a repeated
or empty one, one over its limit, a time or position that does not parse), any key that is
missing, unknown or not granted the tenant and the read role (the app answers the 401/403
problem), an ``after=`` the stores have not applied yet (the app waits, and answers 504 or 503
as documented), a subject or provenance not held (the app's route reads it under the stores
gate and the index keeps it). So the routes stay the contract (docs/openapi.json) and this is
their fast case; tests/service/test_point_lane.py checks both give the same JSON.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from pydantic import TypeAdapter
from starlette.types import ASGIApp, Receive, Scope, Send

from memstack.foundation.log_coordinates import LogCut, Position
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.view import asof as A
from memstack.view.point_rows import visible
from memstack.view.points import points_of
from memstack.view.reads import MAX_NAME, MAX_TOKEN
from memstack.view.types import AsOfInfo

_AS_OF_JSON = TypeAdapter(AsOfInfo)
_FACTS_PARAMS = {"subject": MAX_NAME, "relation": MAX_NAME, "valid": MAX_TOKEN,
                 "known": MAX_TOKEN, "after": MAX_TOKEN}
"""The facts route's parameters and their limits (:class:`memstack.view.reads.FactsParams`
and ``after``)."""
_EVENT_PARAMS = {"after": MAX_TOKEN}
_HEADERS = [(b"content-type", b"application/json")]


class PointReads:
    """ASGI middleware: the point-read lane in front of ``app`` (see the module)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = None
        if scope["type"] == "http" and scope["method"] == "GET":
            try:
                body = _answer(scope)
            except Exception:  # the app answers (or reports) it the usual way
                body = None
        if body is None:
            await self.app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*_HEADERS, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def _answer(scope: Scope) -> bytes | None:
    """The answer's bytes, or None: the app answers."""
    parts = scope["path"].split("/")
    if len(parts) < 5 or parts[:3] != ["", "v1", "tenants"] or not parts[3] \
            or len(parts[3]) > MAX_NAME:
        return None
    tenant = parts[3]
    if len(parts) == 5 and parts[4] == "facts":
        params = _params(scope, _FACTS_PARAMS)
        if params is None or "subject" not in params or not _readable(scope, tenant, params):
            return None
        return _facts(scope, tenant, params)
    if len(parts) == 6 and parts[4] == "events" and parts[5] and len(parts[5]) <= MAX_NAME:
        params = _params(scope, _EVENT_PARAMS)
        if params is None or not _readable(scope, tenant, params):
            return None
        events = _events(scope)
        return None if events is None else points_of(events).held_provenance(tenant, parts[5])
    return None


def _params(scope: Scope, allowed: dict[str, int]) -> dict[str, str] | None:
    """The query's parameters if each is allowed, given once, not empty and within its limit."""
    raw = scope.get("query_string", b"")
    pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True) if raw else []
    params = dict(pairs)
    if len(params) != len(pairs) or any(
            k not in allowed or not v or len(v) > allowed[k] for k, v in params.items()):
        return None
    return params


def _readable(scope: Scope, tenant: str, params: dict[str, str]) -> bool:
    """Whether the request's key may read ``tenant`` and its ``after=`` is applied."""
    state = scope["app"].state
    key = _key(scope)
    grant = None if key is None else state.grants.grant_of(key)
    if grant is None or tenant not in grant.tenants or "read" not in grant.roles:
        return False
    after = params.get("after")
    if after is None:
        return True
    service = state.service
    if service is None:
        return False
    wanted = Position.parse(after)  # raises: the app answers 422
    service.watch.check(wanted)
    covered: bool = service.watch.applied().covers(wanted)
    return covered


def _key(scope: Scope) -> str | None:
    """The API key as the routes read it: ``Authorization: Bearer KEY``, else ``X-API-Key``;
    None for anything less plain (the app decides)."""
    bearer: list[bytes] = []
    header: list[bytes] = []
    for name, value in scope["headers"]:
        if name == b"authorization":
            bearer.append(value)
        elif name == b"x-api-key":
            header.append(value)
    if len(bearer) > 1 or len(header) > 1:
        return None
    if bearer:
        scheme, _, key = bearer[0].decode("latin-1").partition(" ")
        return key if scheme == "Bearer" and key and " " not in key else None
    return header[0].decode("latin-1") if header and header[0] else None


def _events(scope: Scope) -> DuckDBEventIndex | None:
    stores: Any = scope["app"].state.stores_provider()
    events = stores.events
    return events if isinstance(events, DuckDBEventIndex) else None


def _facts(scope: Scope, tenant: str, params: dict[str, str]) -> bytes | None:
    events = _events(scope)
    if events is None:
        return None
    held = points_of(events).held(tenant, params["subject"])
    if held is None:
        return None
    as_of = A.resolve(params.get("valid"), params.get("known"))  # raises: the app's 422
    known = A.known_of(as_of)
    if isinstance(known, LogCut) and held.entries is None:
        return None  # a cut needs the entries: the app's read loads them
    rows = visible(held, params.get("relation"), as_of.valid, known)
    if any(h.version.tenant != tenant for h in rows):
        return None  # never: the index is keyed by tenant; the app's check raises
    return b"".join((b'{"as_of":', _AS_OF_JSON.dump_json(as_of.describe()), b',"facts":[',
                     b",".join(h.json for h in rows), b"]}"))
