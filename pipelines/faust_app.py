"""The live pipeline bound to faust-streaming: one agent that projects ``<prefix>.events``.

Delivery is at-least-once (Faust's default ``processing_guarantee``); exactly-once *effects* come
from the projector: idempotent writes and the applied offsets stored in DuckDB with the rows. The
consumer group's committed offsets are only a hint; on assignment the processor seeks to the
stores' offsets (see ``memstack.pipelines.live_batches``). Faust's exactly-once transactions are
not used.

Nothing happens at import time: :func:`build_live_app` declares the app, its topics, the agent
and the timers; :func:`run_worker` runs it until SIGINT/SIGTERM or until caught up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust
from faust.types import TP, EventT, StreamT
from kafka import TopicPartition

from memstack.foundation.kafka_security import KafkaSecurity, UnprintedStr
from memstack.foundation.settings import Settings
from memstack.pipelines import dlq
from memstack.pipelines.commit_path import CommitPath
from memstack.pipelines.contracts import DeadLetter, Plan, Projector
from memstack.pipelines.faust_records import AGENT_NAME, record_of
from memstack.pipelines.forget_agent import declare_forget_agent, stop_eraser
from memstack.pipelines.forgetting.in_worker import LiveForgetting
from memstack.pipelines.forgetting.processor import ForgetOutcome, Hidden
from memstack.pipelines.forgetting.session_state_store import state_store_for
from memstack.pipelines.lease import client_id, live_group
from memstack.pipelines.live_batches import Embed, LiveConfig, LiveProcessor
from memstack.pipelines.log_reader import end_offsets, open_consumer
from memstack.pipelines.session_state.projector import SessionStateStep, loop_runner
from memstack.pipelines.session_state.table import (
    FaustTableSink,
    SessionStateUpdater,
    changelog_topic,
    define_table,
    ensure_changelog_topic,
)

log = logging.getLogger(__name__)

def faust_broker_url(bootstrap: str) -> str:
    """``host:port[,host:port]`` as Faust's ``kafka://host:port;kafka://host:port``."""
    return ";".join(f"kafka://{server.strip()}" for server in bootstrap.split(",") if server)


def group_id(settings: Settings) -> str:
    """The consumer group (and Faust app id) of the live pipeline for one topic prefix."""
    return live_group(settings.topic_prefix)


def probe_next_offset(bootstrap: str, topic: str, partition: int, offset: int,
                      timeout_s: float = 5.0) -> int | None:
    """The first offset >= ``offset`` holding a record (log start if ``offset`` is before it)."""
    consumer = open_consumer(bootstrap, max_poll_records=1)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=500).values():
                if messages:
                    return int(messages[0].offset)
        return None
    finally:
        consumer.close()


@dataclass
class LiveApp:
    """The Faust app of the live pipeline with its processor and run-time state."""

    settings: Settings
    config: LiveConfig
    app: faust.App
    processor: LiveProcessor
    stop_at: Mapping[int, int] | None = None
    forget_stop_at: Mapping[int, int] | None = None
    forgetting: LiveForgetting | None = None
    """Stop once every partition's applied offset reaches these (``--until-caught-up``)."""
    failure: BaseException | None = None
    caught_up: bool = False
    rebalances: set[asyncio.Future[None]] = field(default_factory=set)
    on_committed: list[Callable[[Plan], None]] = field(default_factory=list)
    """Called on the loop after each committed batch (the service's watch and change feed)."""
    on_forgot: list[Callable[[Hidden | None], None]] = field(default_factory=list)
    """Called on the loop after each forget record was handled (hidden, or skipped: None)."""
    on_erased: list[Callable[[ForgetOutcome], None]] = field(default_factory=list)
    """Called on the eraser's thread after each request was erased and audited."""
    exclusive: Callable[[], AbstractContextManager[None]] | None = None
    """Held while a forget hides a request in the stores (the service's readers wait)."""
    before_assigned: Callable[[list[int]], Awaitable[None]] | None = None
    """Awaited after each rebalance with the assigned partitions, before the processor seeks
    to the stores' offsets (sharded workers open and close their shards here)."""
    session_state: SessionStateStep | None = None
    """The session states this worker keeps (None: a worker without a commit path)."""
    _last: tuple[float, int] = field(default=(0.0, 0))

    def request_stop(self, why: str, *, failed: bool = False) -> None:
        """Stop the worker the way SIGTERM does (the worker's own handler runs). After a
        failure the process also exits by itself if the clean stop hangs (see
        :func:`exit_unless_stopped`), so a supervisor sees it die and can restart it."""
        log.info("stopping the live worker: %s", why)
        if failed:
            exit_unless_stopped(STOP_GRACE_S, why)
        os.kill(os.getpid(), signal.SIGTERM)


STOP_GRACE_S = 30.0
"""How long a worker that failed may take to stop cleanly before it exits with status 1."""


def exit_unless_stopped(grace_s: float, why: str,
                        exit_now: Callable[[int], object] = os._exit) -> threading.Timer:
    """Arm a daemon timer that ends the process with status 1 after ``grace_s``.

    Found by ``memstack eval faults`` (disk full): after a batch failed, Faust's shutdown
    sometimes never finished (the worker logged "Stopping..." and hung for minutes), so the
    service stayed up, answered reads, applied nothing and was never restarted. Exiting
    without the rest of the clean stop is safe: it is what kill -9 does, and the stores keep
    their last committed batch (rows and offsets in one DuckDB transaction, LanceDB merged
    by id); a restart resumes from them.
    """
    def fire() -> None:
        log.error("the live worker did not stop within %.0f s after %s; exiting with status 1 "
                  "(the stores keep their last committed batch; a restart resumes from them)",
                  grace_s, why)
        logging.shutdown()
        exit_now(1)

    timer = threading.Timer(grace_s, fire)
    timer.daemon = True
    timer.start()
    return timer


def faust_settings(settings: Settings, config: LiveConfig) -> dict[str, Any]:
    datadir = settings.home / "faust"
    datadir.mkdir(parents=True, exist_ok=True)
    return {
        "broker": faust_broker_url(settings.bootstrap),
        "broker_client_id": client_id(),  # names this process to the lease (pipelines/lease.py)
        "broker_credentials": faust_credentials(settings.kafka_security),
        "datadir": str(datadir),
        "autodiscover": False,
        "web_enabled": False,
        "broker_session_timeout": config.session_timeout_s,
        "broker_heartbeat_interval": config.heartbeat_s,
        "broker_commit_interval": config.commit_interval_s,
        "consumer_auto_offset_reset": "earliest",
        "topic_allow_declare": config.allow_declare_topics,
        "topic_disable_leader": True,
        "producer_acks": -1,
        "stream_wait_empty": False,
        "processing_guarantee": "at_least_once",
    }


def faust_credentials(security: KafkaSecurity) -> faust.SASLCredentials | faust.SSLCredentials \
        | None:
    """Faust's (aiokafka's) view of the one security definition: the same protocol, SASL
    mechanism and credentials, and the same TLS context as the kafka-python clients."""
    context = security.ssl_context()
    if security.uses_sasl:
        return faust.SASLCredentials(
            username=security.username, ssl_context=context, mechanism=security.mechanism,
            password=UnprintedStr(security.password.reveal()) if security.password else None)
    if context is not None:
        return faust.SSLCredentials(context)
    return None


class _App(faust.App):
    """Faust's app with a hook after each rebalance's seek to the group's committed offsets."""

    after_rebalance: Callable[[], None] | None = None

    def on_rebalance_end(self) -> None:
        super().on_rebalance_end()
        if self.after_rebalance is not None:
            self.after_rebalance()


def build_live_app(settings: Settings, config: LiveConfig, projector: Projector,
                   forgetting: LiveForgetting | None = None, *,
                   stateful: CommitPath | None = None, embed: Embed | None = None) -> LiveApp:
    """Declare the Faust app: raw-bytes events topic, the projecting agent, hooks and timers.

    ``stateful``: the commit path that ``projector`` runs (``projector`` itself, or the one a
    wrapper such as the bench's timer delegates to); it gains the session-state step, and its
    vectors step encodes each batch on the processor's encode thread. None: the worker keeps
    no session state (sharded workers). ``embed``: the encode step when there is no
    ``stateful`` (sharded workers: :func:`~memstack.pipelines.shards.projector.shard_vectors`);
    with neither, a batch encodes inside its write."""
    app = _App(config.group_id or group_id(settings), **faust_settings(settings, config))
    events = app.topic(settings.events_topic, key_type=bytes, value_type=bytes,
                       key_serializer="raw", value_serializer="raw")

    async def send_dead_letters(letters: list[DeadLetter]) -> None:
        producer = await app.maybe_start_producer()
        pending = []
        for letter in letters:
            rec = dlq.encode(letter)
            pending.append(await producer.send(settings.dlq_topic, rec.key, rec.value, None,
                                               None, rec.headers))
        await asyncio.gather(*pending)  # the broker acknowledged every dead letter

    async def seek(partition: int, offset: int) -> None:
        tp = TP(settings.events_topic, partition)
        if tp not in app.consumer.assignment():  # a newer rebalance took it: its owner seeks
            log.info("not seeking p%d: no longer assigned to this worker", partition)
            return
        await app.consumer.seek(tp, offset)

    def probe(partition: int, offset: int) -> int | None:
        return probe_next_offset(settings.bootstrap, settings.events_topic, partition, offset)

    state = _session_state(app, settings, stateful) if stateful is not None else None
    if state is None:
        log.info("no commit path given: session state is off for this worker")
    live = LiveApp(settings, config, app,
                   LiveProcessor(projector, send_dead_letters, seek, probe,
                                 embed=stateful.vectors if stateful is not None else embed))
    live.session_state = state
    _declare_agent(live, events)
    if forgetting is not None:
        live.forgetting = forgetting
        if state is not None:  # the session state forgets too
            forgetting.session_state = state_store_for(state.updater, state.run)
        declare_forget_agent(live, forgetting)
    _declare_hooks(live)
    return live


def _session_state(app: faust.App, settings: Settings, path: CommitPath) -> SessionStateStep:
    """Keep each session's recurrent state in a Faust table (changelog-backed, durable): the
    commit path's step 5, with the commit path's encoder."""
    ensure_changelog_topic(settings.bootstrap, changelog_topic(group_id(settings)),
                           settings.partitions)
    sink = FaustTableSink(define_table(app, settings.partitions))
    path.state = SessionStateStep(SessionStateUpdater(sink, sink, path.encoder),
                                  loop_runner(app.loop))
    return path.state


def _declare_agent(live: LiveApp, events: faust.TopicT) -> None:
    cfg = live.config

    async def project(stream: StreamT[bytes]) -> None:
        # take_events is faust-streaming's (StreamT's stub lacks it): events keep their message.
        batches = stream.take_events(cfg.batch_max, within=cfg.within_s)  # type: ignore[attr-defined]
        try:
            async for batch in batches:
                records = [record_of(event.message) for event in _events(batch)]
                await live.processor.process(records)  # a failure stops the worker: failed()
        finally:  # stopping: the batch in flight commits first (a failure was reported)
            with contextlib.suppress(Exception):
                await live.processor.drain()

    def committed(plan: Plan) -> None:
        for hook in live.on_committed:
            hook(plan)

    def failed(exc: BaseException) -> None:
        live.failure = exc
        log.error("projecting a batch failed; stopping the worker (the stores keep their last "
                  "committed batch)", exc_info=exc)
        live.request_stop("a batch failed", failed=True)

    live.processor.committed.append(committed)
    live.processor.on_failure.append(failed)
    live.app.agent(events, name=AGENT_NAME, concurrency=1)(project)


def _events(batch: Sequence[EventT[bytes]]) -> list[EventT[bytes]]:
    return list(batch)


def _declare_hooks(live: LiveApp) -> None:
    app, topic = live.app, live.settings.events_topic
    assert isinstance(app, _App)

    # Faust seeks every assigned partition to the group's committed offset when a rebalance
    # ends (Recovery._resume_streams -> perform_seek), after the on_partitions_assigned signal;
    # so the stores' offsets are applied from on_rebalance_end, which runs after that seek.
    def after_rebalance() -> None:
        assigned = app.consumer.assignment()
        mine = sorted(tp.partition for tp in assigned if tp.topic == topic)
        resumes = [_assigned(live, mine)]
        if live.forgetting is not None:
            forgets = sorted(tp.partition for tp in assigned
                             if tp.topic == live.settings.forget_topic)
            resumes.append(_resume_forgets(live, live.forgetting, forgets))
        for resume in resumes:
            future = asyncio.ensure_future(resume)
            live.rebalances.add(future)
            future.add_done_callback(_rebalance_done(live))

    app.after_rebalance = after_rebalance

    @app.timer(live.config.progress_every_s)  # type: ignore[untyped-decorator]  # faust's decorator is untyped
    async def progress() -> None:
        await log_progress(live)

    @app.timer(0.5)  # type: ignore[untyped-decorator]
    async def until_caught_up() -> None:
        if live.stop_at is None or live.caught_up:
            return
        applied = live.processor.applied_offsets()
        forgot = live.forgetting.next_offsets if live.forgetting is not None else {}
        if all(applied.get(p, 0) >= end for p, end in live.stop_at.items()) and all(
                forgot.get(p, 0) >= end for p, end in (live.forget_stop_at or {}).items()):
            live.caught_up = True
            await log_progress(live)
            live.request_stop(f"caught up with the end offsets seen at start {dict(live.stop_at)}")


async def _assigned(live: LiveApp, partitions: list[int]) -> None:
    if live.before_assigned is not None:
        await live.before_assigned(partitions)
    await live.processor.on_assigned(partitions)


async def _resume_forgets(live: LiveApp, forgetting: LiveForgetting,
                          partitions: Sequence[int]) -> None:
    """Re-read the ledger from the first record not handled yet.

    A request applied across a rebalance (the first one, when the worker starts) lets Faust drop
    the records it had fetched after it (seen: the next requests never arrive); applied ones
    are skipped on the way (``forget_applied.json``).
    """
    for partition in partitions:
        await live.app.consumer.seek(TP(live.settings.forget_topic, partition),
                                     forgetting.next_offsets.get(partition, 0))


def _rebalance_done(live: LiveApp) -> Callable[[asyncio.Future[None]], None]:
    def done(future: asyncio.Future[None]) -> None:
        live.rebalances.discard(future)
        if not future.cancelled() and future.exception() is not None:
            live.failure = future.exception()
            log.error("seeking to the stores' offsets failed: %r", live.failure)
            live.request_stop("the seek after a rebalance failed", failed=True)
    return done


async def log_progress(live: LiveApp) -> None:
    """One INFO line: applied vs end offset per partition, rate since the last line."""
    loop = asyncio.get_running_loop()
    settings = live.settings
    try:
        ends = await loop.run_in_executor(None, end_offsets, settings.bootstrap,
                                          settings.events_topic)
    except Exception as exc:  # progress must never stop the pipeline
        log.warning("progress: could not read end offsets: %s", exc)
        return
    stats = live.processor.stats
    now = time.monotonic()
    last_t, last_n = live._last
    rate = (stats.applied - last_n) / (now - last_t) if last_t else 0.0
    live._last = (now, stats.applied)
    applied = live.processor.applied_offsets()
    parts = ", ".join(f"p{p} {applied.get(p, 0)}/{end}" for p, end in sorted(ends.items()))
    lag = sum(max(0, end - applied.get(p, 0)) for p, end in ends.items())
    log.info("progress: %s; lag %d; %d events applied, %d dead letters, %.1f events/s",
             parts, lag, stats.applied, stats.dead_letters, rate)


def run_worker(live: LiveApp, loglevel: str = "WARNING") -> int:
    """Run the Faust worker until SIGINT/SIGTERM (or caught up); 0 when it stopped cleanly."""
    worker = faust.Worker(live.app, loglevel=loglevel, quiet=True, redirect_stdouts=False,
                          override_logging=False, workdir=str(Path(live.settings.home)))
    worker.spinner = None  # its terminal escapes (ESC[?25h) would land in logs and --json output
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        log.debug("faust worker exited with %s", exc.code)
    finally:
        stop_eraser(live)
        live.processor.close()
    return 1 if live.failure is not None else 0
