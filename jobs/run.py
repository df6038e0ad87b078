"""``memstack run``: the live pipeline as one deployable (settings + stores + Faust worker).

The worker consumes ``<prefix>.events`` with faust-streaming and projects every record into the
stores in ``--stores`` (default ``<MEMSTACK_HOME>/stores/live``). It logs its lifecycle at INFO
and a progress line every 10 s, stops cleanly on SIGINT/SIGTERM and, with
``--until-caught-up``, exits once the end offsets seen at start are applied.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kafka.errors import KafkaError

from memstack.foundation.errors import BrokerUnavailableError
from memstack.foundation.settings import Settings
from memstack.pipelines.live_batches import BATCH_MAX, LiveConfig

if TYPE_CHECKING:
    from memstack.pipelines.commit_path import CommitPath
    from memstack.pipelines.consolidation.feeding import FeedStep
    from memstack.pipelines.faust_app import LiveApp
    from memstack.pipelines.forgetting.in_worker import LiveForgetting
    from memstack.pipelines.lease import DeploymentLease
    from memstack.pipelines.metrics import LiveMetrics
    from memstack.pipelines.projector import StoreProjector
    from memstack.pipelines.stores.bundle import Stores

log = logging.getLogger(__name__)

ENCODER_BATCH = 64
"""Texts per forward pass of the torch encoder (the ONNX encoder runs each text alone); not
the worker's batch of records, which is larger (``--batch-size``)."""

NOISY_LOGGERS = ("faust", "mode", "aiokafka", "kafka")


@dataclass(frozen=True)
class RunOptions:
    """What ``memstack run`` was asked to do."""

    stores: Path | None = None
    until_caught_up: bool = False
    batch_max: int = BATCH_MAX
    within_s: float = 0.25
    threads: int = 2
    session_timeout_s: float = 6.0
    metrics_port: int | None = None
    """Serve Prometheus ``/metrics`` on this loopback port (None: no metrics server)."""

    def stores_dir(self, settings: Settings) -> Path:
        """``--stores``, else where ``stores/current`` points (``stores/live`` without one)."""
        from memstack.pipelines.replay.switch import current_stores

        return self.stores if self.stores is not None else current_stores(settings)

    def live_config(self) -> LiveConfig:
        return LiveConfig(batch_max=self.batch_max, within_s=self.within_s,
                          session_timeout_s=self.session_timeout_s,
                          heartbeat_s=min(1.5, self.session_timeout_s / 4))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stores", type=Path, default=None,
                        help="stores directory (default: where $MEMSTACK_HOME/stores/current "
                             "points, else $MEMSTACK_HOME/stores/live)")
    parser.add_argument("--until-caught-up", action="store_true",
                        help="exit once the end offsets seen at start are applied")
    parser.add_argument("--batch-size", type=int, default=BATCH_MAX,
                        help=f"records per batch at most (default {BATCH_MAX}); a partial "
                             "batch goes after --within seconds")
    parser.add_argument("--within", type=float, default=0.25,
                        help="seconds to wait for a full batch before a partial one (0.25)")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads of the embedding model (default 2)")
    parser.add_argument("--session-timeout", type=float, default=6.0,
                        help="consumer-group session timeout in seconds (default 6)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve Prometheus metrics at http://127.0.0.1:PORT/metrics "
                             "(0: any free port; docs/operations.md)")


def options_from(args: argparse.Namespace) -> RunOptions:
    return RunOptions(stores=args.stores, until_caught_up=args.until_caught_up,
                      batch_max=args.batch_size, within_s=args.within, threads=args.threads,
                      session_timeout_s=args.session_timeout,
                      metrics_port=args.metrics_port)


def open_projector(directory: Path, settings: Settings, threads: int,
                   batch_size: int = ENCODER_BATCH) -> tuple[CommitPath, Stores]:
    """The live commit path over the DuckDB + LanceDB stores in ``directory``, MiniLM encoder,
    with the consolidation feed (the worker adds the session state: ``build_live_app``).

    The caller owns the returned stores and closes them after the commit path."""
    # One cache in front of the model: the forget-time session state and the feed's teacher
    # find recent vectors there.
    from memstack.foundation.keystore import FileKeyStore
    from memstack.pipelines.commit_path import CommitPath
    from memstack.pipelines.embedding import CachingEncoder, encoder_kind_for, make_encoder
    from memstack.pipelines.forgetting.ledger import ForgetLedger
    from memstack.pipelines.projector import StoreProjector
    from memstack.pipelines.stores.bundle import Stores

    kind = encoder_kind_for(directory)  # the setting, else the encoder that built the stores
    encoder = CachingEncoder(make_encoder(kind, batch_size=batch_size, threads=threads).load())
    ledger = ForgetLedger.load(settings.bootstrap, settings.forget_topic)
    stores = Stores.open(directory)
    try:
        store = StoreProjector(stores, encoder, settings.events_topic,
                               keys=FileKeyStore(settings.keys_dir), forgotten=ledger,
                               maintain_in_background=True)
        return CommitPath(store, feed=_consolidation_feed(store, stores, settings)), stores
    except BaseException:
        stores.close()
        raise


def _consolidation_feed(store: StoreProjector, stores: Stores, settings: Settings) -> FeedStep:
    """Publish each batch's fact changes to ``<prefix>.consolidation`` for the Ray learners."""
    from memstack.pipelines.consolidation.distill import Distiller, StoreTeacher
    from memstack.pipelines.consolidation.feed import Sharding
    from memstack.pipelines.consolidation.feeding import FeedStep
    from memstack.pipelines.consolidation.producer import FeedProducer, ensure_feed_topic

    teacher = StoreTeacher(stores.events, store.encoder)
    feed = FeedProducer(settings.bootstrap, ensure_feed_topic(settings), Distiller(teacher),
                        Sharding.from_env())
    return FeedStep(feed)


def _live_forgetting(settings: Settings, directory: Path, path: CommitPath) -> LiveForgetting:
    """Forget requests applied by the worker itself: it is the stores' only writer."""
    from memstack.jobs.forget import log_lineage, processor_for
    from memstack.pipelines.forgetting.in_worker import LiveForgetting

    base = path.store
    assert base.forgotten is not None
    lineage = log_lineage(settings)  # one for the worker's life: each batch reads what is new
    return LiveForgetting(directory, base, base.forgotten,  # type: ignore[arg-type]
                          lambda fs: processor_for(settings, fs, lineage), lineage=lineage)


TRANSIENT = ("GroupCoordinatorNotAvailable", "NotCoordinatorForGroup", "NodeNotReady")
"""aiokafka logs these at ERROR while a fresh broker elects the group's coordinator; the
client retries and goes on."""


def _not_transient(record: logging.LogRecord) -> bool:
    return not any(word in record.getMessage() for word in TRANSIENT)


def quiet_libraries(verbose: bool) -> None:
    """Faust, mode and the Kafka clients log every connection at INFO; keep memstack's lines
    (and drop aiokafka's transient coordinator errors at start)."""
    if not verbose:
        for name in NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        for name in ("aiokafka.consumer.group_coordinator", "aiokafka"):
            logger = logging.getLogger(name)
            if _not_transient not in logger.filters:
                logger.addFilter(_not_transient)


def take_lease(settings: Settings, options: RunOptions) -> DeploymentLease:
    """This deployment's lease (home, topic prefix, the live group), taken before the worker
    joins the group; :class:`~memstack.pipelines.lease.LeaseHeldError` when another worker
    owns it (pipelines/lease.py)."""
    from memstack.pipelines.lease import acquire_lease, broker_members, live_group

    return acquire_lease(settings.home, settings.topic_prefix, live_group(settings.topic_prefix),
                         broker_members(settings.bootstrap),
                         expire_s=options.session_timeout_s + 3.0)


def run_live(settings: Settings, options: RunOptions) -> int:
    """Run the live worker until stopped; 0 on a clean stop, 1 when a batch failed."""
    from memstack.infra.preflight import require_server_stack, require_topics

    # A core install (no server extra) is told what to install before any broker is asked;
    # Faust itself (~9 s to import) is imported only once the lease is held, so a second
    # worker is refused within seconds.
    require_server_stack()
    started = time.monotonic()
    require_topics(settings.bootstrap, [settings.events_topic, settings.forget_topic,
                                        settings.dlq_topic])
    with take_lease(settings, options):
        return _run_live(settings, options, started)


def _run_live(settings: Settings, options: RunOptions, started: float) -> int:
    from memstack.pipelines.faust_app import build_live_app, run_worker
    from memstack.pipelines.forgetting.in_worker import pending_offsets
    from memstack.pipelines.log_reader import end_offsets

    try:
        ends = end_offsets(settings.bootstrap, settings.events_topic)
    except KafkaError as exc:
        raise BrokerUnavailableError(
            f"no Kafka broker at {settings.bootstrap}; start one with `memstack infra up` or "
            "set MEMSTACK_BOOTSTRAP") from exc
    directory = options.stores_dir(settings)
    directory.mkdir(parents=True, exist_ok=True)
    path, _ = open_projector(directory, settings, options.threads)
    metrics = None
    try:
        live = build_live_app(settings, options.live_config(), path,
                              forgetting=_live_forgetting(settings, directory, path),
                              stateful=path)
        if options.metrics_port is not None:
            metrics = serve_metrics(live, path.feed, options.metrics_port)
        if options.until_caught_up:
            live.stop_at = ends
            live.forget_stop_at = pending_offsets(settings.bootstrap, settings.forget_topic,
                                                  directory)
        log.info("live worker: group %s, topic %s at %s, stores %s (applied %s); end offsets "
                 "now %s; ready in %.1f s", live.app.conf.id, settings.events_topic,
                 settings.bootstrap, directory, path.applied_offsets(), ends,
                 time.monotonic() - started)
        code = run_worker(live)
    finally:
        if metrics is not None:
            metrics.close()
        path.store.stores.close()
    log.info("live worker stopped (exit %d) after %.1f s: %d events applied, %d dead letters",
             code, time.monotonic() - started, live.processor.stats.applied,
             live.processor.stats.dead_letters)
    return code


def serve_metrics(live: LiveApp, feed: FeedStep | None, port: int) -> LiveMetrics:
    """The worker's metrics, served on their own loopback port (``--metrics-port``)."""
    from memstack.pipelines.metrics import LiveMetrics, attach

    metrics = LiveMetrics()
    attach(metrics, live, feed)
    metrics.serve(port)
    return metrics


CHILD_ENV_EXCLUDED = frozenset({"PYFLINK_GATEWAY_DISABLED"})


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment that makes ``memstack run`` in a child process use ``settings``.

    PyFlink marks a process that has run Python UDFs in loopback mode (a replay in this
    process) with ``PYFLINK_GATEWAY_DISABLED``; a child inheriting it could never start a
    replay of its own, so it is left out."""
    inherited = {k: v for k, v in os.environ.items() if k not in CHILD_ENV_EXCLUDED}
    return {**inherited, "MEMSTACK_HOME": str(settings.home),
            "MEMSTACK_BOOTSTRAP": settings.bootstrap,
            "MEMSTACK_TOPIC_PREFIX": settings.topic_prefix,
            "MEMSTACK_PARTITIONS": str(settings.partitions),
            "MEMSTACK_SEAL": "1" if settings.seal else "0",
            **settings.kafka_security.to_env()}


def spawn_worker(settings: Settings, stores: Path, *extra: str,
                 log_path: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``python -m memstack.cli run --stores STORES [extra]`` as a child process
    (tests, benchmarks); its log goes to ``log_path`` (appended) or is discarded."""
    argv = [sys.executable, "-m", "memstack.cli", "run", "--stores", str(stores), *extra]
    out = log_path.open("ab") if log_path is not None else subprocess.DEVNULL
    try:
        return subprocess.Popen(argv, env=worker_env(settings), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=out)
    finally:
        if log_path is not None:
            out.close()  # type: ignore[union-attr]  # a file here; the child holds its own copy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memstack-run", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    quiet_libraries(args.verbose)
    return run_live(Settings.from_env(), options_from(args))


if __name__ == "__main__":
    sys.exit(main())
