"""The warm replay service's process: warm up once, then run submitted jobs one at a time.

Errors are RFC 9457 problem details (the HTTP service's shape, docs/service.md): 422 names the
field of a bad request, 409 says which job is running, 404 and 405 name what exists.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memstack.foundation.errors import MemstackError
from memstack.foundation.settings import Settings
from memstack.jobs.replay_service.request import ReplayRequest
from memstack.pipelines.replay.progress import ProgressTracker
from memstack.pipelines.replay.session_cluster import SessionCluster
from memstack.server.problems import MEDIA_TYPE, ProblemError, invalid

log = logging.getLogger(__name__)

DEFAULT_PORT = 8766
MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class Running:
    into: str
    since: float


class ReplayService:
    """The state the handlers share: the settings, the one job slot, what was done."""

    def __init__(self, settings: Settings, work_dir: Path) -> None:
        self.settings = settings
        self.work_dir = work_dir
        self.session: SessionCluster | None = None
        self.warm_up_s: float | None = None
        self.jobs_done = 0
        self.running: Running | None = None
        self._slot = threading.Lock()

    def warm(self, parallelism: int) -> float:
        """Start the session cluster (``parallelism`` slots) and warm it and the model up."""
        from memstack.pipelines.replay.warm_up import warm_up

        began = time.perf_counter()
        self.session = SessionCluster.start(self.work_dir / "flink", parallelism)
        warm_up(self.settings, self.session, parallelism)
        self.warm_up_s = time.perf_counter() - began
        return self.warm_up_s

    def close(self) -> None:
        if self.session is not None:
            self.session.close()

    def health(self) -> dict[str, Any]:
        running = self.running
        return {"status": "ready" if self.warm_up_s is not None else "warming",
                "warm_up_s": self.warm_up_s, "jobs_done": self.jobs_done,
                "running": None if running is None else
                {"into": running.into, "since": running.since}}

    def try_begin(self, into: str) -> Running | None:
        """Take the job slot; the job that holds it when it is taken."""
        if not self._slot.acquire(blocking=False):
            return self.running or Running("?", time.time())
        self.running = Running(into, time.time())
        return None

    def end(self) -> None:
        self.running = None
        self.jobs_done += 1
        self._slot.release()

    def run(self, request: ReplayRequest, send: Any) -> dict[str, Any]:
        """Run one job (the slot held); progress lines go to ``send``; the summary."""
        from memstack.jobs.replay import main, summary

        def progress(tracker: ProgressTracker, now: float) -> None:
            send({"progress": tracker.render(now)})

        result = main(start=request.start, stop=request.stop, into=Path(request.into),
                      parallelism=request.parallelism, session=self.session,
                      send_dead_letters=request.send_dead_letters,
                      honour_forget=request.honour_forget, embed_batch=request.embed_batch,
                      prepare_key=request.prepare_key, settings=self.settings,
                      on_progress=progress)
        out: dict[str, Any] = json.loads(summary(result))
        return out


def _first_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "body"
    return where, f"{where}: {err.get('msg', 'invalid')}"


class Handler(BaseHTTPRequestHandler):
    """``GET /healthz`` and ``POST /replays``; NDJSON lines for a job, closed at its end."""

    server: ServiceServer
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _json(self, status: int, body: Mapping[str, Any], media: str) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _problem(self, error: ProblemError) -> None:
        """The HTTP service's problem document (:mod:`memstack.server.problems`)."""
        self._json(error.status, error.problem(self.path).model_dump(mode="json",
                                                                     exclude_none=True),
                   MEDIA_TYPE)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._json(200, self.server.service.health(), "application/json")
            return
        self._problem(ProblemError(404, f"no {self.path}: the service answers GET /healthz "
                                        "and POST /replays"))

    def do_POST(self) -> None:
        if self.path != "/replays":
            self._problem(ProblemError(404, f"no {self.path}: submit jobs to POST /replays"))
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY:
            self._problem(invalid("body", f"one JSON object of 1 to {MAX_BODY} bytes "
                                          f"(Content-Length was {length})"))
            return
        try:
            request = ReplayRequest.model_validate_json(self.rfile.read(length))
        except ValidationError as exc:
            field, detail = _first_error(exc)
            self._problem(ProblemError(422, detail, field=field, slug="invalid-parameter",
                                       title="Invalid parameter"))
            return
        self._run(request)

    def _run(self, request: ReplayRequest) -> None:
        service = self.server.service
        if service.warm_up_s is None:
            self._problem(ProblemError(503, "the service is still warming up; GET /healthz "
                                            "says when it is ready", slug="warming",
                                       title="Warming up"))
            return
        slots = service.session.slots if service.session is not None else 0
        if request.parallelism > slots:
            self._problem(invalid("parallelism", f"{request.parallelism} is more than the "
                                  f"service's {slots} slot(s); pass at most {slots} or start "
                                  f"the service with --parallelism {request.parallelism}"))
            return
        busy = service.try_begin(request.into)
        if busy is not None:
            self._problem(ProblemError(
                409, f"a replay into {busy.into} has run since "
                f"{time.strftime('%H:%M:%S', time.gmtime(busy.since))} UTC; submit again when "
                "GET /healthz shows none running", slug="replay-running",
                title="A replay is running"))
            return
        # the slot is free before the last line goes out: a client may submit its next job
        # the moment it reads this one's result
        outcome: dict[str, Any]
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()
            self._send({"accepted": request.to_body()})
            try:
                outcome = {"result": service.run(request, self._send)}
            except MemstackError as exc:
                log.warning("replay service: the job into %s failed: %s", request.into, exc)
                outcome = {"error": str(exc), "kind": type(exc).__name__}
        finally:
            service.end()
        self._send(outcome)

    def _send(self, line: Mapping[str, Any]) -> None:
        """One NDJSON line; a client that went away does not stop the job."""
        try:
            self.wfile.write(json.dumps(line).encode() + b"\n")
            self.wfile.flush()
        except OSError:
            pass


class ServiceServer(ThreadingHTTPServer):
    daemon_threads = False  # a stop waits for the running job's handler
    block_on_close = True

    def __init__(self, address: tuple[str, int], service: ReplayService) -> None:
        super().__init__(address, Handler)
        self.service = service


def serve(settings: Settings, work_dir: Path, *, host: str = "127.0.0.1",
          port: int = DEFAULT_PORT, parallelism: int = 1) -> int:
    """Bind, warm up, print ``{"replay_service": URL, ...}`` on stdout, serve until SIGTERM or
    SIGINT (the running job finishes first)."""
    service = ReplayService(settings, work_dir)
    server = ServiceServer((host, port), service)
    url = f"http://{host}:{server.server_port}"
    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        if not stopping.is_set():
            stopping.set()
            log.info("replay service: stopping (signal %d); a running job finishes first",
                     signum)
            threading.Thread(target=server.shutdown, name="replay-service-stop").start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    serving = threading.Thread(target=server.serve_forever, name="replay-service")
    serving.start()  # /healthz answers "warming" meanwhile
    try:
        seconds = service.warm(parallelism)
        print(json.dumps({"replay_service": url, "warm_up_s": round(seconds, 2),
                          "parallelism": parallelism}), flush=True)
        log.info("replay service: ready at %s (warm in %.1f s)", url, seconds)
        while serving.is_alive():
            serving.join(timeout=0.5)
    finally:
        if not stopping.is_set():
            server.shutdown()
        serving.join()
        server.server_close()
        service.close()
    log.info("replay service: stopped after %d job(s)", service.jobs_done)
    return 0
