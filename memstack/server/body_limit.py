"""A bound on every request body the service reads (413 problem past it).

``POST events`` checks its own limit as it streams (``--max-bytes``); this bounds the other
bodies FastAPI or the MCP endpoint would otherwise read whole into memory (``POST forget``,
``POST /mcp``): a declared ``Content-Length`` over the limit is refused before the app runs, and
a body without one is counted as it arrives and cut off with 413 when it passes the limit.
"""

from __future__ import annotations

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstack.server.problems import ProblemError

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
"""The default limit: the service's ``--max-bytes``."""


def _too_large(limit: int, declared: int | None = None) -> str:
    said = f"the body has {declared} bytes" if declared is not None else "the body passed"
    return f"{said}; the limit is {limit} bytes"


class BodyLimit:
    """ASGI middleware: request bodies of at most ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            problem = ProblemError(413, _too_large(self.max_bytes, int(declared)), field="body")
            await problem.response(scope.get("path"))(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # FastAPI re-raises an HTTPException from here
                    raise HTTPException(413, {"message": _too_large(self.max_bytes),
                                              "field": "body"})
            return message

        await self.app(scope, counted, send)
