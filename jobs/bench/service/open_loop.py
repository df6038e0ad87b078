"""An open-loop read load: requests sent at a fixed offered rate, whatever the answers take.

Agents read on their own schedule, not as fast as the service answers; closed-loop readers
take every cycle they can get and measure the opposite. Each request of :class:`OpenLoad` is
due at ``start + i / rate``; a pool sends it then, and its latency runs from when it was due
(a request that waits for a free sender counts the wait: no coordinated omission).

The requests are plain HTTP/1.1 GETs on keep-alive sockets (:class:`Gets`), one per sender
thread: the load generator shares the machine's cores with the service, and an httpx client
cost this process ~2 ms of CPU per request (0.39 of a core at 200 reads a second, measured
with ``client_cores_*``), taken from the service it measures. The service parses every
request in full as it parses any client's.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlencode

import httpx

SENDERS = 32
"""Requests in flight at most per kind."""


@dataclass
class Stream:
    """One kind of request at one offered rate, with the latencies (ms) it saw."""

    rate: float
    read: Callable[[int], tuple[int, bytes]]
    """Sends request ``i``: its status and body."""
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        with ThreadPoolExecutor(SENDERS) as pool:
            start, i = time.perf_counter(), 0
            while not stop.is_set():
                due = start + i / self.rate
                time.sleep(max(0.0, due - time.perf_counter()))
                pool.submit(self._one, i, due)
                i += 1

    def _one(self, i: int, due: float) -> None:
        try:
            status, body = self.read(i)
            if status != 200:
                self.errors.append(f"{status} {body[:200]!r}")
        except (OSError, ValueError) as exc:
            self.errors.append(repr(exc))
        self.latencies_ms.append((time.perf_counter() - due) * 1000)


class OpenLoad:
    """Streams sent until :meth:`stop` (use as a context manager around the ingest)."""

    def __init__(self, *streams: Stream) -> None:
        self.streams = streams
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=s.run, args=(self._stop,)) for s in streams]

    def __enter__(self) -> OpenLoad:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()


class Gets:
    """GET requests to one service over keep-alive sockets, one per calling thread; the
    responses read in full (``Content-Length`` bodies, as the service sends)."""

    def __init__(self, base: httpx.URL | str, headers: dict[str, str]) -> None:
        url = httpx.URL(str(base))
        self.address = (url.host, url.port or 80)
        self._head = "".join(f"{k}: {v}\r\n" for k, v in {
            "Host": f"{url.host}:{url.port}", **headers}.items())
        self._local = threading.local()

    def get(self, path: str, params: dict[str, str | int]) -> tuple[int, bytes]:
        request = (f"GET {path}?{urlencode(params)} HTTP/1.1\r\n{self._head}\r\n").encode()
        for attempt in (1, 2):  # once more on a fresh socket if the kept one was closed
            held = getattr(self._local, "conn", None)
            if held is None:
                held = self._local.conn = socket.create_connection(self.address, timeout=300)
                held.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._local.buffer = b""
            try:
                held.sendall(request)
                return self._response(held)
            except (ConnectionError, _Closed):
                held.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _response(self, conn: socket.socket) -> tuple[int, bytes]:
        data: bytes = self._local.buffer
        while b"\r\n\r\n" not in data:
            data += self._read(conn)
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in
                  (line.partition(":") for line in lines[1:])}
        if "content-length" not in fields:
            raise ValueError(f"a response without Content-Length: {lines[0]!r}")
        length = int(fields["content-length"])
        while len(data) < length:
            data += self._read(conn)
        self._local.buffer = data[length:]
        if fields.get("connection", "").lower() == "close":
            conn.close()
            self._local.conn = None
        return status, data[:length]

    @staticmethod
    def _read(conn: socket.socket) -> bytes:
        chunk = conn.recv(65536)
        if not chunk:
            raise _Closed("the service closed the connection")
        return chunk


class _Closed(Exception):
    pass
