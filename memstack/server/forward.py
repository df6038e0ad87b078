"""A reader process hands what it does not answer to the writer: the API stays one URL.

``memstack serve --readers N`` runs the read routes in N reader processes that share the
service's listening socket (docs/service.md, "Reader processes"). A reader answers reads of
the stores from its snapshot; writes, forgets, a forget's status, the change feed, session
state, MCP and metrics go to the writer process, whose URL the newest snapshot manifest
names. The request and the answer are streamed both ways unchanged (status, headers, body),
so the writer's answers (its 4xx problems, its position tokens, its feed) are the client's.
When the writer cannot be reached the reader answers 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable

import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstack.server.problems import MEDIA_TYPE, ProblemError
from memstack.view.reads import READS

log = logging.getLogger(__name__)

_LOCAL_GET = re.compile(
    r"^/(healthz|readyz|docs|redoc|openapi\.json|ui(/.*)?|v1/key"
    r"|v1/tenants/[^/]+/(" + "|".join(map(re.escape, sorted(READS))) + r"|subjects"
    r"|events/[^/]+))$")
"""What a reader answers itself (GET only): the probes, the docs, the inspector's page and
every read of the stores."""
_HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer",
               b"upgrade", b"proxy-authorization", b"proxy-authenticate"}
"""Headers of one connection, not of the request or answer (RFC 9110 7.6.1)."""


def answered_here(method: str, path: str) -> bool:
    """Whether a reader answers ``method path`` itself (else the writer does)."""
    return method in ("GET", "HEAD") and _LOCAL_GET.match(path) is not None


class ForwardToWriter:
    """ASGI middleware of a reader: requests it does not answer go to ``writer_url()``."""

    def __init__(self, app: ASGIApp, writer_url: Callable[[], str | None],
                 timeout_s: float = 120.0) -> None:
        self.app = app
        self._writer_url = writer_url
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=5.0),
                                         limits=httpx.Limits(max_keepalive_connections=32))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or answered_here(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        url = self._writer_url()
        if url is None:
            await _unavailable(send, "the writer process has not published where it listens "
                                     "yet")
            return
        target = url.rstrip("/") + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        headers = [(k, v) for k, v in scope["headers"]
                   if k.lower() not in _HOP_BY_HOP and k.lower() != b"host"]
        request = self._client.build_request(scope["method"], target, headers=headers,
                                             content=_body(receive))
        try:
            answer = await self._client.send(request, stream=True)
        except httpx.TransportError as exc:
            log.warning("forwarding %s %s to the writer at %s failed: %s", scope["method"],
                        scope["path"], url, exc)
            await _unavailable(send, f"the writer process did not answer ({type(exc).__name__})"
                                     "; reads keep working from the last snapshot")
            return
        try:
            await send({"type": "http.response.start", "status": answer.status_code,
                        "headers": [(k, v) for k, v in answer.headers.raw
                                    if k.lower() not in _HOP_BY_HOP]})
            async for chunk in answer.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await answer.aclose()


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


async def _unavailable(send: Send, why: str) -> None:
    problem = ProblemError(503, f"{why}. Retry shortly.", headers={"Retry-After": "1"})
    body = problem.response().body
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", MEDIA_TYPE.encode()), (b"retry-after", b"1"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
