"""``memstack serve``: the live worker and the HTTP API in one process that owns the stores.

The Faust worker and a uvicorn server share one asyncio loop: the server is a service of the
Faust app, started once the worker is ready (its tables recovered) and stopped before it, so
SIGTERM drains in order: no new requests, in-flight ones answered, the current batch committed,
the stores closed. ``$MEMSTACK_HOME/service.json`` (url, pid) tells ``memstack query`` where
the service listens; it is removed on exit. See docs/service.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

from memstack.foundation.log_coordinates import Position
from memstack.foundation.settings import Settings
from memstack.jobs.run import (
    RunOptions,
    _live_forgetting,
    open_projector,
)
from memstack.jobs.service.file import service_file
from memstack.jobs.service.listen import HTTP_PARSER, KEEP_ALIVE_S, bound_socket
from memstack.jobs.service.spawn import ServiceStartError, spawn_service
from memstack.jobs.service.switch import attach_switcher

if TYPE_CHECKING:
    from fastapi import FastAPI

    from memstack.jobs.service.readers import ReadersOfWriter
    from memstack.pipelines.consolidation.feeding import FeedStep
    from memstack.pipelines.faust_app import LiveApp
    from memstack.pipelines.metrics import LiveMetrics
    from memstack.pipelines.projector import StoreProjector
    from memstack.pipelines.service.changes import ChangeFeed
    from memstack.pipelines.service.health import ServiceHealth
    from memstack.pipelines.service.parts import LiveService
    from memstack.pipelines.service.watch import AppliedWatch

__all__ = ["DEFAULT_PORT", "ServiceOptions", "ServiceStartError", "exit_after", "openapi_app",
           "run_service", "spawn_service"]
log = logging.getLogger(__name__)

DEFAULT_PORT = 8765


@dataclass(frozen=True)
class ServiceOptions:
    run: RunOptions
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    after_timeout_s: float = 30.0
    max_events: int = 1000
    max_bytes: int = 4 * 1024 * 1024
    read_concurrency: int = 3
    search_concurrency: int = 1
    ready_max_lag: int = 1000
    """``/readyz`` answers 503 while the stores are more records behind the log than this."""
    readers: int = 0
    """Reader processes answering the reads over published snapshots (0: reads run in this
    process; docs/service.md, "Reader processes")."""


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the Faust worker owns SIGINT/SIGTERM."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _http_service(server: _Server, on_listening: Any,
                  sockets: list[socket.socket] | None = None,
                  on_draining: Callable[[], None] = lambda: None) -> type:
    import mode

    class HttpService(mode.Service):
        serving: asyncio.Task[None] | None = None

        async def on_start(self) -> None:
            self.serving = asyncio.ensure_future(server.serve(sockets=sockets))
            while not server.started:
                if self.serving.done():
                    self.serving.result()  # raises why the server did not start (port taken)
                    raise RuntimeError("the HTTP server stopped while starting")
                await asyncio.sleep(0.05)
            on_listening(server)

        async def on_stop(self) -> None:
            on_draining()  # waiting after= reads answer 503 now, not 500 when cut off
            server.should_exit = True
            if self.serving is not None:
                await self.serving

    return HttpService


def _live_service(settings: Settings, options: ServiceOptions, live: LiveApp,
                  client: Any, base: StoreProjector) -> LiveService:
    from memstack.pipelines.service.changes import ChangeFeed
    from memstack.pipelines.service.forgets import ForgetDesk
    from memstack.pipelines.service.gate import ReadWriteGate
    from memstack.pipelines.service.parts import LiveService
    from memstack.pipelines.service.watch import AppliedWatch
    from memstack.pipelines.service.writes import EventWriter, WriteLimits

    forgetting = live.forgetting
    assert forgetting is not None

    def applied() -> Position:
        return Position(live.processor.applied_offsets(), forgetting.next_offsets)

    gate = ReadWriteGate(options.read_concurrency, options.search_concurrency)
    watch = AppliedWatch(applied, _partition_counts(settings))
    feed = ChangeFeed(Position(base.applied_offsets()))
    health = _health(settings, options, live)
    writer = EventWriter(client, settings.events_topic,
                         lookup=_stored_lookup(base, gate, datetime.now(UTC)),
                         on_written=health.acknowledged)
    desk = ForgetDesk(client, base.stores.directory, settings.home / "forget",
                      forgetting.ledger.get, warning=settings.sealing_warning)

    _hook(live, feed, watch, applied)
    live.exclusive = gate.writing
    step = live.session_state
    return LiveService(watch, gate, feed, writer, desk,
                       WriteLimits(options.max_events, options.max_bytes),
                       options.after_timeout_s, health, settings.sealing_warning,
                       None if step is None else step.updater.snapshot)


def _health(settings: Settings, options: ServiceOptions, live: LiveApp) -> ServiceHealth:
    """The service's health over the worker's applied offsets, assignment and the consumer's
    high-water marks (pipelines/service/health.py); stuck after the ``after=`` timeout."""
    from faust.types import TP

    from memstack.pipelines.log_reader import end_offsets
    from memstack.pipelines.service.health import ServiceHealth

    topic = settings.events_topic
    partitions = sorted(end_offsets(settings.bootstrap, topic))

    def assigned() -> set[int] | None:
        try:
            return {tp.partition for tp in live.app.consumer.assignment() if tp.topic == topic}
        except Exception:  # the consumer is not started (or is stopping): not known
            return None

    def highwater() -> dict[int, int]:
        found: dict[int, int] = {}
        for p in partitions:
            try:
                found[p] = int(live.app.consumer.highwater(TP(topic, p)) or 0)
            except Exception:  # not fetched yet: the acknowledged offsets stand for it
                continue
        return found

    return ServiceHealth(partitions, live.processor.applied_offsets, assigned, highwater,
                         stopping=lambda: bool(live.app.should_stop),
                         stuck_after_s=options.after_timeout_s,
                         ready_max_lag=options.ready_max_lag)


def _partition_counts(settings: Settings) -> Position:
    """The partitions of the events and forget topics, as a position of next offset 0 each:
    an ``after=`` naming a partition outside it is refused at once (422)."""
    from memstack.infra.topics import describe_topics

    infos = describe_topics(settings.bootstrap, [settings.events_topic, settings.forget_topic])
    events, forgets = (range(info.partitions) for info in infos)
    return Position(dict.fromkeys(events, 0), dict.fromkeys(forgets, 0))


def _hook(live: LiveApp, feed: ChangeFeed, watch: AppliedWatch,
          applied: Callable[[], Position]) -> None:
    """After each commit and each forget: publish the changes, wake the after= readers."""
    from memstack.pipelines.forgetting.phases import read_status
    from memstack.pipelines.service.changes import changes_of

    def committed(plan: Any) -> None:
        feed.publish(changes_of(plan.mutations), applied())
        watch.notify()

    def forgot(hidden: Any) -> None:
        if hidden is not None:
            request = hidden.request
            record = read_status(live.settings.home / "forget", request.request_id) or {}
            feed.publish([(request.tenant, "forgotten", {
                "request_id": request.request_id, "scope": request.describe(),
                "events": len(hidden.resolved.targets.event_ids),
                "status": record.get("status", "invisible"),
                "audit_passed": record.get("passed")})], applied())
        watch.notify()

    live.on_committed.append(committed)
    live.on_forgot.append(forgot)


def _stored_lookup(base: StoreProjector, gate: Any, started: datetime) -> Any:
    """Look an event id up in the stores only when it was made before the service started
    (a retry across a restart); ids made later were seen by this process's writer."""
    from memstack.foundation.log_coordinates import Written
    from memstack.schemas.ids import uuid7_millis

    horizon = int((started + timedelta(seconds=5)).timestamp() * 1000)

    def lookup(event_id: str) -> Written | None:
        if uuid7_millis(event_id) > horizon:
            return None
        with gate.reading():
            row = base.stores.events.record(event_id)
        return None if row is None else Written(row.event_id, row.partition, row.offset, row.tt)
    return lookup


def run_service(settings: Settings, options: ServiceOptions) -> int:
    """Run worker + API until SIGTERM/SIGINT; 0 on a clean stop.

    Before anything can take a partition, the deployment's lease is taken and the port bound,
    so a second service (or a taken port) fails here, outside the consumer group."""
    from memstack.infra.preflight import require_topics
    from memstack.jobs.run import take_lease
    from memstack.jobs.service.blas import one_blas_thread
    from memstack.server.api_keys import LiveApiKeys

    keys = LiveApiKeys()  # fails before starting anything when no keys are configured
    one_blas_thread()
    require_topics(settings.bootstrap, [settings.events_topic, settings.forget_topic,
                                        settings.dlq_topic])
    with take_lease(settings, options.run), bound_socket(
            options.host, options.port, shared=options.readers > 0) as sock:
        return _serve(settings, options, keys, sock)


def _serve(settings: Settings, options: ServiceOptions, keys: Any, sock: socket.socket) -> int:
    from memstack.client import MemoryClient
    from memstack.pipelines.faust_app import build_live_app, run_worker
    from memstack.server.app import create_app
    from memstack.view.resident.registry import refresh_soon, warm_in_background

    directory = options.run.stores_dir(settings)
    directory.mkdir(parents=True, exist_ok=True)
    path, _ = open_projector(directory, settings, options.run.threads)
    base = path.store
    client = MemoryClient("_service", "memstack-http", settings=settings, source="memstack-http",
                          tracer_provider=False)  # the routes' spans stand for its writes
    metrics = None
    readers = None
    stack = ExitStack()
    try:
        live = build_live_app(settings, options.run.live_config(), path,
                              forgetting=_live_forgetting(settings, directory, path),
                              stateful=path)
        service = _live_service(settings, options, live, client, base)
        public, listen = sock, [sock]
        if options.readers > 0:
            listen = [stack.enter_context(bound_socket("127.0.0.1", 0))]
            readers = _readers(settings, options, public, live, base, service)
        attach_switcher(settings, live, path, service.forgets, service_file(settings))
        app = create_app(lambda: base.stores, keys=keys, encoder=base.encoder, service=service,
                         mcp_host=options.host)
        metrics = _observed(app, live, path.feed, options)
        warm_in_background(base.stores.vectors)  # the first search does not pay the build
        live.on_forgot.append(lambda _: refresh_soon(base.stores.vectors))  # erased rows leave
        server = _Server(uvicorn.Config(app, host=options.host, port=options.port,
                                        log_level="warning", lifespan="off", log_config=None,
                                        timeout_graceful_shutdown=10,  # logs: the root's
                                        timeout_keep_alive=KEEP_ALIVE_S, http=HTTP_PARSER))
        live.app.service(_http_service(
            server, _announce(settings, directory, base.encoder.name, service.health,
                              public, readers),
            listen, _draining(service.watch, readers)))
        code = run_worker(live)
        if not server.started:  # the worker stopped before the API listened: not a clean stop
            code = max(code, 1)
    finally:
        if readers is not None:
            readers.stop()
        stack.close()
        service_file(settings).unlink(missing_ok=True)
        if metrics is not None:
            metrics.close()
        client.close()
        base.stores.close()
    log.info("service stopped (exit %d): %d events applied", code,
             live.processor.stats.applied)
    return code


def exit_after(code: int, grace_s: float = 5.0) -> None:
    """Make sure the process ends with ``code`` once the service returned: SIGTERM gets its
    default action back, and a daemon timer exits after ``grace_s`` if a thread a library left
    behind keeps the interpreter alive (seen: a service that failed to start logged "service
    stopped", never exited and ignored SIGTERM)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def fire() -> None:
        log.warning("threads still running %.0f s after the service stopped: exiting %d",
                    grace_s, code)
        logging.shutdown()
        os._exit(code)

    timer = threading.Timer(grace_s, fire)
    timer.daemon = True
    timer.start()


def _observed(app: FastAPI, live: LiveApp, feed: FeedStep | None,
              options: ServiceOptions) -> LiveMetrics:
    """``/metrics`` and the routes' metrics and spans (spans when ``MEMSTACK_OTEL=1``);
    ``--metrics-port`` serves the same metrics on a port of their own too."""
    from memstack.foundation.telemetry import memory_tracer
    from memstack.pipelines.metrics import LiveMetrics, attach
    from memstack.server.observe import observe

    metrics = LiveMetrics()
    attach(metrics, live, feed)
    observe(app, metrics, memory_tracer())
    if options.run.metrics_port is not None:
        metrics.serve(options.run.metrics_port)
    return metrics


def _announce(settings: Settings, directory: Path, encoder: str,
              health: ServiceHealth | None = None, public: socket.socket | None = None,
              readers: ReadersOfWriter | None = None) -> Any:
    def listening(server: _Server) -> None:
        if health is not None:
            health.started = True
        url = _url(server.servers[0].sockets[0])
        found: dict[str, Any] = {"url": url}
        if readers is not None and public is not None:
            readers.start(url)  # the writer's own port: where the readers forward writes
            url = _url(public)
            found = {"url": url, "writer_url": found["url"],
                     "readers": readers.processes.pids()}
        path = service_file(settings)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**found, "pid": os.getpid(), "stores": str(directory),
                                   "topic_prefix": settings.topic_prefix, "encoder": encoder}))
        os.replace(tmp, path)
        log.info("memstack service ready at %s (stores %s); reads, writes and forgets over "
                 "HTTP, docs at %s/docs", url, directory, url)
    return listening


def _url(sock: Any) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}"


def _draining(watch: AppliedWatch, readers: ReadersOfWriter | None) -> Callable[[], None]:
    def draining() -> None:
        watch.drain()
        if readers is not None:
            readers.draining()
    return draining


def _readers(settings: Settings, options: ServiceOptions, public: socket.socket,
             live: LiveApp, base: StoreProjector, service: LiveService) -> ReadersOfWriter:
    from memstack.jobs.service.readers import ReadersOfWriter

    readers = ReadersOfWriter.of(
        settings, options.readers, public, lambda: base.stores.events, service.watch.applied,
        _partition_counts(settings),
        ["--host", options.host, "--after-timeout", str(options.after_timeout_s),
         "--read-concurrency", str(options.read_concurrency),
         "--search-concurrency", str(options.search_concurrency)])
    live.on_committed.append(readers.wake)
    live.on_forgot.append(readers.wake)
    return readers


def openapi_app() -> FastAPI:
    """The service's app without stores or a worker (for the OpenAPI spec only)."""
    from memstack.server.api_keys import ApiKeys
    from memstack.server.app import create_app
    from memstack.server.routes import add_service_routes

    def unused() -> Any:
        raise AssertionError("the spec needs no stores")

    app = create_app(unused, keys=ApiKeys(()))
    add_service_routes(app)
    return app
