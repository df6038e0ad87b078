"""A reader process of ``memstack serve --readers N``: the read routes over published snapshots.

Started by the writer process with the service's listening socket (``--fd``), it answers reads
of the stores from the newest snapshot the writer published (:class:`SnapshotFollower`), waits
for ``after=`` until a published snapshot covers it, and forwards everything else to the writer
(:mod:`memstack.server.forward`). It never opens the writer's DuckDB file, takes no Kafka
partition and holds no lease. See docs/service.md, "Reader processes".

When the writer is gone (killed, stuck), the reader keeps answering from the last snapshot and
its ``/healthz`` says ``stale`` (with how long); writes answer 503 until a writer publishes
again. A reader whose writer was replaced by a restarted one follows the new writer's snapshots
until the new writer's own readers are up, then stops (it was orphaned, nobody supervises it).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from memstack.foundation.log_coordinates import Position
from memstack.jobs.service.dir_watch import DirectoryWatch
from memstack.jobs.service.follower import SnapshotFollower
from memstack.jobs.service.listen import HTTP_PARSER, KEEP_ALIVE_S
from memstack.pipelines.service.gate import ReadWriteGate
from memstack.pipelines.service.parts import DEFAULT_AFTER_TIMEOUT_S, HealthSource
from memstack.pipelines.service.watch import AppliedWatch
from memstack.pipelines.service.writes import WriteLimits

log = logging.getLogger(__name__)

POLL_S = 0.5
"""How often a reader looks at the manifest without being woken (inotify wakes it at once on
a change; without inotify it polls every 10 ms, :mod:`.dir_watch`)."""
MAX_LAG_S = 1.0
"""A read without ``after=`` sees a snapshot at most about this much older than the newest
published (a read with ``after=`` makes the reader swap at once)."""
STALE_AFTER_S = 3.0
"""A manifest whose heartbeat is older than this: the writer is gone or stuck."""
FIRST_SNAPSHOT_S = 300.0


@dataclass
class ReaderHealth:
    """``/healthz`` and ``/readyz`` of a reader: ``ok``, or ``stale`` once the writer's
    heartbeat is older than :data:`STALE_AFTER_S` (200 either way: the reader answers reads)."""

    follower: SnapshotFollower
    draining: bool = False

    def report(self) -> ReaderHealth:
        return self

    def _body(self, ok: str) -> dict[str, Any]:
        manifest = self.follower.manifest
        age = time.time() - self.follower.heartbeat()
        body: dict[str, Any] = {"status": ok if age <= STALE_AFTER_S else "stale",
                                "process": "reader", "pid": os.getpid()}
        if manifest is not None:
            body["snapshot"] = {"seq": manifest.seq, "position": manifest.position,
                                "published_s_ago": round(time.time() - manifest.published_at,
                                                         3)}
        if age > STALE_AFTER_S:
            body["stale_s"] = round(age, 1)
            body["reason"] = ("the writer process has not published for "
                              f"{age:.0f} s: reads answer from the last snapshot, writes 503")
        return body

    def healthz(self) -> dict[str, Any]:
        return self._body("ok")

    def readyz(self) -> dict[str, Any]:
        body = self._body("ready")
        if self.draining:
            body["status"] = "not ready"
            body["reasons"] = ["draining"]
        return body


class _PinningGate:
    """Bounds the reads at once, and pins the current snapshot for each."""

    def __init__(self, follower: SnapshotFollower, reads: int, searches: int) -> None:
        self._follower = follower
        self._bound = ReadWriteGate(reads, searches)

    @contextmanager
    def reading(self, heavy: bool = False) -> Iterator[None]:
        with self._bound.reading(heavy), self._follower.pinned():
            yield


@dataclass
class ReaderSide:
    """A reader's :class:`memstack.pipelines.service.parts.ReadSide`."""

    watch: ReaderWatch
    gate: _PinningGate
    health: HealthSource | None
    after_timeout_s: float = DEFAULT_AFTER_TIMEOUT_S
    limits: WriteLimits = field(default_factory=WriteLimits)
    sealing_warning: str | None = None
    session_state: None = None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="memstack-reader", description=__doc__)
    p.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    p.add_argument("--snapshots", type=Path, required=True)
    p.add_argument("--writer-pid", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--after-timeout", type=float, default=DEFAULT_AFTER_TIMEOUT_S)
    p.add_argument("--read-concurrency", type=int, default=3)
    p.add_argument("--search-concurrency", type=int, default=1)
    args = p.parse_args(argv)
    logging.basicConfig(level=os.environ.get("MEMSTACK_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s reader[%(process)d] %(name)s: "
                               "%(message)s")
    from memstack.jobs.run import quiet_libraries

    quiet_libraries(False)
    # every swap opens a snapshot (several a second under ingest): not worth a line each
    logging.getLogger("memstack.pipelines.stores.duckdb_index").setLevel(logging.WARNING)
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.jobs.service.blas import one_blas_thread
    from memstack.pipelines.embedding import encoder_kind_for, make_encoder
    from memstack.server.api_keys import LiveApiKeys
    from memstack.server.app import create_app
    from memstack.server.forward import ForwardToWriter
    from memstack.view.resident.registry import warm_in_background

    keys = LiveApiKeys()
    one_blas_thread()
    follower = SnapshotFollower(args.snapshots)
    manifest = await asyncio.to_thread(follower.wait_first, FIRST_SNAPSHOT_S)
    encoder = make_encoder(encoder_kind_for(Path(manifest.stores)), threads=1)
    warm_in_background(follower.stores().vectors)  # its own resident search index
    health = ReaderHealth(follower)
    watch = ReaderWatch(follower, Position.parse(manifest.partitions))
    side = ReaderSide(watch, _PinningGate(follower, args.read_concurrency,
                                          args.search_concurrency), health,
                      args.after_timeout, sealing_warning=Settings.from_env().sealing_warning)
    app = create_app(follower.stores, keys=keys, encoder=encoder, service=side,
                     mcp_host=args.host, write_routes=False)

    def writer_url() -> str | None:
        found = follower.newest
        return None if found is None else found.writer_url

    app.add_middleware(ForwardToWriter, writer_url=writer_url)
    sock = socket.socket(fileno=args.fd)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           log_config=None, timeout_keep_alive=KEEP_ALIVE_S,
                                           http=HTTP_PARSER,
                                           timeout_graceful_shutdown=10))
    loop = asyncio.get_running_loop()

    def stop() -> None:
        health.draining = True
        watch.drain()
        server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    stopped = threading.Event()
    following = threading.Thread(target=_follow, name="snapshot-follower", daemon=True,
                                 args=(follower, watch, args.writer_pid, loop, stop, stopped))
    following.start()
    log.info("reader serving snapshot %d (position %s) of %s", manifest.seq, manifest.position,
             manifest.stores)
    try:
        await server.serve(sockets=[sock])
    finally:
        stopped.set()
        following.join(timeout=5)
        follower.close()
    return 0


class ReaderWatch(AppliedWatch):
    """The snapshot's position, and the ``after=`` reads waiting for a newer one: each wakes
    the follower (:func:`_follow` swaps at once while one waits)."""

    def __init__(self, follower: SnapshotFollower, partitions: Position) -> None:
        super().__init__(follower.position, partitions)
        self.waiting = 0
        self.wakes = DirectoryWatch(follower.directory)

    async def wait(self, wanted: Position, timeout_s: float) -> Position:
        if self.applied().covers(wanted):
            return await super().wait(wanted, timeout_s)
        self.waiting += 1
        self.wakes.poke()
        try:
            return await super().wait(wanted, timeout_s)
        finally:
            self.waiting -= 1


def _follow(follower: SnapshotFollower, watch: ReaderWatch, writer_pid: int,
            loop: asyncio.AbstractEventLoop, stop: Callable[[], None],
            stopped: threading.Event) -> None:
    """On a thread of its own, woken by inotify when the writer replaces the manifest and by
    ``after=`` reads that wait (a 10 ms poll cost ~20 ms of CPU per second here): read each
    new manifest, and swap its snapshot in when a read waits for it or the current one is
    :data:`MAX_LAG_S` old (opening a DuckDB file costs ~20 ms of CPU, more as it grows, and
    under ingest the writer publishes five a second); wake the ``after=`` waiters on the loop;
    stop once a restarted writer's own readers serve (this one was orphaned)."""
    replaced_since: float | None = None
    swapped_at = time.monotonic()
    while not stopped.is_set():
        timeout = POLL_S
        if follower.behind:
            timeout = max(0.0, min(POLL_S, swapped_at + MAX_LAG_S - time.monotonic()))
        watch.wakes.wait(timeout)
        due = watch.waiting > 0 or time.monotonic() - swapped_at >= MAX_LAG_S
        if not (follower.manifest_changed() or (follower.behind and due)):
            continue
        try:
            swapped = follower.refresh(swap=due)
        except Exception:  # a snapshot removed under it, a full disk: the next poll retries
            log.exception("opening the newest snapshot failed; retrying")
            continue
        if swapped:
            swapped_at = time.monotonic()
            loop.call_soon_threadsafe(watch.notify)
        newest = follower.newest
        if newest is not None and newest.writer_pid != writer_pid:
            replaced_since = replaced_since or time.monotonic()
            if time.monotonic() - replaced_since > STALE_AFTER_S:
                log.info("writer %d was replaced by %d; this orphaned reader stops", writer_pid,
                         newest.writer_pid)
                loop.call_soon_threadsafe(stop)
                break
    watch.wakes.close()


if __name__ == "__main__":
    raise SystemExit(main())
