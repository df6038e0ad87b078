"""``memstack shards worker`` and ``memstack shards router``: a sharded deployment.

A **worker** is the live pipeline (the same Faust agent and projector as ``memstack run``) in
the consumer group ``<prefix>-sharded``: it owns the partitions Kafka assigns it and, for each,
the shard ``<root>/shards/p<partition>`` (opened after each rebalance, resumed from the offset
committed in it). It serves its shards' reads to the router on ``/shard/*`` and announces itself
in ``<root>/workers/<worker>.json``. The **router** answers the read API over every shard
(``memstack.server.router``). See docs/scaling.md.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

from memstack.foundation.settings import Settings
from memstack.jobs.run import RunOptions
from memstack.jobs.service import _http_service, _Server
from memstack.jobs.service.listen import HTTP_PARSER

if TYPE_CHECKING:
    from memstack.pipelines.contracts import Projector
    from memstack.pipelines.stores.bundle import Stores

log = logging.getLogger(__name__)


def group_of(settings: Settings) -> str:
    """The consumer group (and Faust app id) of sharded workers for one topic prefix."""
    return f"{settings.topic_prefix}-sharded"


def sharded_root(settings: Settings, stores: Path | None) -> Path:
    return stores if stores is not None else settings.stores_dir / "sharded"


@dataclass(frozen=True)
class WorkerOptions:
    run: RunOptions
    worker: str | None = None
    """The worker's name (its card); default ``<host>-<pid>``."""
    shard_host: str = "127.0.0.1"
    shard_port: int = 0
    group: str | None = None
    """The consumer group; default ``<prefix>-sharded`` (one group per deployment)."""


def _shard_opener(settings: Settings, encoder: Any) -> Any:
    """Opens a shard directory as stores + a StoreProjector (the same as ``memstack run``'s,
    without the consolidation feed)."""
    from memstack.foundation.keystore import FileKeyStore
    from memstack.pipelines.forgetting.ledger import ForgetLedger
    from memstack.pipelines.projector import StoreProjector
    from memstack.pipelines.stores.bundle import Stores

    ledger = ForgetLedger.load(settings.bootstrap, settings.forget_topic)
    keys = FileKeyStore(settings.keys_dir)

    def open_shard(directory: Path) -> tuple[Projector, Stores]:
        stores = Stores.open(directory)
        try:
            return StoreProjector(stores, encoder, settings.events_topic, keys=keys,
                                  forgotten=ledger, maintain_in_background=True), stores
        except BaseException:
            stores.close()
            raise

    return open_shard


def run_shard_worker(settings: Settings, options: WorkerOptions) -> int:
    """Run one sharded worker until SIGTERM/SIGINT; 0 on a clean stop."""
    from memstack.infra.preflight import require_topics
    from memstack.pipelines.embedding import CachingEncoder, make_encoder
    from memstack.pipelines.faust_app import build_live_app, run_worker
    from memstack.pipelines.log_reader import end_offsets
    from memstack.pipelines.shards.layout import WorkerCard, card_path, write_card
    from memstack.pipelines.shards.projector import ShardedProjector, shard_vectors
    from memstack.server.shards.api import shard_app
    from memstack.server.shards.reads import ShardReader

    require_topics(settings.bootstrap, [settings.events_topic, settings.dlq_topic])
    root = sharded_root(settings, options.run.stores)
    worker = options.worker or f"{socket.gethostname()}-{os.getpid()}"
    encoder = CachingEncoder(make_encoder(batch_size=options.run.batch_max,
                                          threads=options.run.threads).load())
    sharded = ShardedProjector(root, _shard_opener(settings, encoder),
                               lambda: end_offsets(settings.bootstrap, settings.events_topic))
    group = options.group or group_of(settings)
    config = replace(options.run.live_config(), group_id=group)
    live = build_live_app(settings, config, sharded, embed=shard_vectors(encoder))
    processor = live.processor

    async def assign(partitions: list[int]) -> None:
        await processor.on_store(sharded.assign, partitions, sharded.expect())

    live.before_assigned = assign
    app = shard_app(sharded, ShardReader(encoder), worker)
    server = _Server(uvicorn.Config(app, host=options.shard_host, port=options.shard_port,
                                    log_level="warning", lifespan="off",
                                    timeout_graceful_shutdown=5, http=HTTP_PARSER))

    def listening(srv: _Server) -> None:
        host, port = srv.servers[0].sockets[0].getsockname()[:2]
        write_card(root, WorkerCard.here(worker, f"http://{host}:{port}"))
        log.info("sharded worker %s: group %s, shards under %s, shard API at http://%s:%d",
                 worker, group, root, host, port)

    live.app.service(_http_service(server, listening))
    try:
        code = run_worker(live)
    finally:
        card_path(root, worker).unlink(missing_ok=True)
    log.info("sharded worker %s stopped (exit %d): %d events applied", worker, code,
             processor.stats.applied)
    return code


def run_router(settings: Settings, root: Path | None, peers: list[str], host: str, port: int,
               after_timeout_s: float) -> int:
    """Serve the read API over every shard until SIGINT/SIGTERM."""
    from memstack.pipelines.log_reader import end_offsets
    from memstack.server.api_keys import LiveApiKeys
    from memstack.server.router.app import router_app
    from memstack.server.router.fanout import Fanout

    keys = LiveApiKeys()  # the keys file re-read when it changes, as by memstack serve
    fanout = Fanout(discover_workers(sharded_root(settings, root), peers),
                    sorted(end_offsets(settings.bootstrap, settings.events_topic)))
    app = router_app(fanout, keys, after_timeout_s=after_timeout_s)
    log.info("router for %d partitions of %s at http://%s:%d", len(fanout.partitions),
             settings.events_topic, host, port)
    uvicorn.run(app, host=host, port=port, log_level="warning", http=HTTP_PARSER)
    fanout.close()
    return 0


def discover_workers(root: Path, peers: list[str]) -> Any:
    """The workers' URLs: ``peers`` when given, else the cards under ``root``."""
    from memstack.pipelines.shards.layout import read_cards

    def urls() -> list[str]:
        return list(peers) if peers else [card.url for card in read_cards(root)]

    return urls


def spawn_shard_worker(settings: Settings, root: Path, worker: str, log_path: Path,
                       *extra: str) -> subprocess.Popen[bytes]:
    """Start ``memstack shards worker`` as a child process (tests, benchmarks)."""
    from memstack.jobs.run import worker_env

    argv = [sys.executable, "-m", "memstack.cli", "shards", "worker", "--stores", str(root),
            "--worker", worker, *extra]
    with log_path.open("ab") as out:
        return subprocess.Popen(argv, env=worker_env(settings), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=out)


def wait_for_cards(root: Path, workers: list[str], timeout_s: float = 240.0) -> None:
    """Wait until every named worker announced its shard API."""
    from memstack.pipelines.shards.layout import card_path

    deadline = time.monotonic() + timeout_s
    while not all(card_path(root, w).exists() for w in workers):
        if time.monotonic() > deadline:
            missing = [w for w in workers if not card_path(root, w).exists()]
            raise TimeoutError(f"workers {missing} did not announce themselves in "
                               f"{timeout_s:.0f} s; see their logs")
        time.sleep(0.2)
