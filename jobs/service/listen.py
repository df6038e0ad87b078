"""The service's listening socket and its HTTP connections' keep-alive."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from memstack.foundation.errors import MemstackError

KEEP_ALIVE_S = 30
"""Seconds the HTTP server keeps an idle connection open (uvicorn's default is 5). A client's
pool keeps idle connections as long (httpx: 5 s by default); with the same timeout on both
sides, a request sent on a pooled connection as the server closes it is reset
(``Connection reset by peer``: seen by ``memstack bench service`` at 200 reads/s). A server
timeout longer than the clients' keeps the close on the client's side."""

HTTP_PARSER = "httptools"
"""uvicorn's HTTP/1.1 implementation for every server of the service (writer, readers, shard
workers): the C parser. uvicorn's default ("auto") falls back to the pure-Python h11 when
httptools is missing; naming it makes a missing install fail at start instead of costing
~0.25 ms of CPU per request (a facts read: 0.31 ms against 0.55 ms, docs/service.md)."""


class PortTakenError(MemstackError):
    """The service's port is taken; free it or pass another ``--port``."""


@contextmanager
def bound_socket(host: str, port: int, *, shared: bool = False) -> Iterator[socket.socket]:
    """A socket listening on ``host:port`` (uvicorn serves it once the worker is ready;
    connections wait in the backlog until then), closed on leaving; :class:`PortTakenError`
    when the port is taken. Listening at once holds the port: two sockets with SO_REUSEADDR
    may both be bound to one port until one listens.

    ``shared`` (reader processes): SO_REUSEPORT too, so that a restarted writer can listen
    beside the readers a killed one left serving (they stop once its own readers serve). A
    second service is kept out by the deployment's lease, taken before the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio: NODELAY
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise PortTakenError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); stop "
                             "what holds it, or pass another --port (0: any free one)") from exc
    try:
        yield sock
    finally:
        sock.close()
