"""Submit a job to the warm replay service and follow it to its end."""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO
from urllib.parse import urlsplit

from memstack.jobs.replay_service.request import ReplayRequest
from memstack.pipelines.replay.errors import ReplayError, ReplayJobError


class ReplayServiceError(ReplayError):
    """The replay service refused the job or cannot be reached; the message says why."""


def _connection(url: str, timeout_s: float) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ReplayServiceError(f"--service {url!r} must be http://HOST:PORT, the URL "
                                 "`memstack replay-service` printed")
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)


def health(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    conn = _connection(url, timeout_s)
    try:
        conn.request("GET", "/healthz")
        out: dict[str, Any] = json.loads(conn.getresponse().read())
        return out
    except OSError as exc:
        raise ReplayServiceError(f"no replay service answers at {url} ({exc}); start one with "
                                 "`memstack replay-service`") from exc
    finally:
        conn.close()


def submit(url: str, request: ReplayRequest,
           on_progress: Callable[[list[str]], None] | None = None,
           *, timeout_s: float = 600.0) -> dict[str, Any]:
    """Run ``request`` on the service at ``url``; the job's summary (what ``memstack replay``
    prints). ``timeout_s`` bounds the wait between two lines (the service sends progress
    every 2 s while a job runs)."""
    conn = _connection(url, timeout_s)
    try:
        try:
            conn.request("POST", "/replays", body=json.dumps(request.to_body()),
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
        except OSError as exc:
            raise ReplayServiceError(f"no replay service answers at {url} ({exc}); start one "
                                     "with `memstack replay-service`") from exc
        if response.status != 200:
            body = json.loads(response.read() or b"{}")
            raise ReplayServiceError(f"the replay service at {url} answered {response.status}: "
                                     f"{body.get('detail', body)}")
        for raw in response:
            line = json.loads(raw)
            if "progress" in line and on_progress is not None:
                on_progress(list(line["progress"]))
            elif "result" in line:
                result: dict[str, Any] = line["result"]
                return result
            elif "error" in line:
                raise ReplayJobError(f"the replay on the service at {url} failed: "
                                     f"{line['error']}")
        raise ReplayServiceError(f"the replay service at {url} closed the connection before "
                                 "the job's result (was it stopped?); run the same replay "
                                 "again: it catches the stores up from where they are")
    finally:
        conn.close()


def print_lines(stream: TextIO = sys.stderr) -> Callable[[list[str]], None]:
    def show(lines: list[str]) -> None:
        for line in lines:
            print(line, file=stream, flush=True)
    return show
