"""The live worker's agent on ``<prefix>.forget``: requests are taken in batches (up to
:data:`FORGET_BATCH_MAX`, waiting :data:`FORGET_WITHIN_S` for more), each hidden on the store
thread between two batches of events; then, by default, the store thread purges the whole
batch in one pass of every store and the worker's
:class:`~memstack.pipelines.forgetting.auditor.Auditor` thread audits it
(``LiveConfig.background_erase`` hands purge and audits to the worker's
:class:`~memstack.pipelines.forgetting.eraser.Eraser` thread instead, while ingest goes
on). The hides and each purge hold the service's read gate (outside it a DuckDB ``CHECKPOINT``
is skipped, silently, while a reader holds a transaction; see docs/forget.md).

A batch whose lineage cannot read the log (the broker away) is applied again with back-off;
any other failure (a full disk) stops the worker as a failed batch does, and a restart applies
the requests again from the start (every step is idempotent). A request's ledger offset counts
as handled once its batch returned (:meth:`LiveForgetting.apply_all`), so reads ``after=`` it
wait until then; it counts as applied in the stores (``forget_applied.json``) once erased and
audited.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from faust.types import StreamT
from kafka.errors import KafkaError

from memstack.pipelines.faust_records import AGENT_NAME, record_of
from memstack.pipelines.forgetting.auditor import Auditor
from memstack.pipelines.forgetting.eraser import Eraser
from memstack.pipelines.forgetting.in_worker import LiveForgetting
from memstack.pipelines.forgetting.processor import ForgetOutcome, Hidden
from memstack.pipelines.log_reader import LogRecord

if TYPE_CHECKING:
    from memstack.pipelines.faust_app import LiveApp

log = logging.getLogger(__name__)

ERASER_DRAIN_S = 120.0
"""How long a stopping worker lets its eraser (or auditor) finish the requests it has; what is
left is erased and audited after the restart (the requests are not marked applied)."""
FORGET_BATCH_MAX = 100
"""Forget requests taken together: hidden one by one, then (without an eraser) erased in one
pass of every store (:meth:`LiveForgetting.apply_all`)."""
FORGET_WITHIN_S = 0.05
"""How long a request waits for others to join its batch."""
FORGET_BROKER_RETRIES = 12
"""Attempts of a forget request whose lineage cannot read the log (the broker away): with
back-off up to 10 s, about 100 s in all, inside the producers' 120 s delivery timeout; then the
worker stops and a restart applies it again."""


def declare_forget_agent(live: LiveApp, forgetting: LiveForgetting) -> None:
    """Forget requests are hidden on the store thread, between two batches of events, and
    erased by an :class:`Eraser` thread (started here; :func:`stop_eraser` stops it) whose
    purges hold the service's read gate."""
    def erased(outcome: ForgetOutcome) -> None:
        for hook in live.on_erased:
            hook(outcome)

    def gate() -> AbstractContextManager[None]:
        return live.exclusive() if live.exclusive is not None else nullcontext()

    forgetting.on_erased = erased
    forgetting.gate = gate
    if forgetting.eraser is None and live.config.background_erase:
        forgetting.eraser = Eraser(forgetting.erasing_processor, on_erased=erased,
                                   exclusive=forgetting.exclusive).start()
    elif forgetting.eraser is None and forgetting.auditor is None:
        forgetting.auditor = Auditor(on_audited=forgetting.audited,
                                     exclusive=forgetting.serial)
    ledger = live.app.topic(live.settings.forget_topic, key_type=bytes, value_type=bytes,
                            key_serializer="raw", value_serializer="raw")

    def apply(records: list[LogRecord]) -> list[Hidden | None]:
        return forgetting.apply_all(records)  # each hide under forgetting.exclusive()

    async def applied(records: list[LogRecord]) -> list[Hidden | None]:
        """Apply requests; again while the broker is away (their lineage reads the log)."""
        for attempt in range(1, FORGET_BROKER_RETRIES):
            try:
                return await live.processor.on_store(apply, records)
            except KafkaError as exc:
                log.warning("the forget requests from %s could not read the log (%r); "
                            "applying them again (attempt %d of %d)", records[0].position,
                            exc, attempt + 1, FORGET_BROKER_RETRIES)
                await asyncio.sleep(min(2.0 ** attempt, 10.0))
        return await live.processor.on_store(apply, records)  # the last attempt: errors raise

    async def forget(stream: StreamT[bytes]) -> None:
        # take_events is faust-streaming's (StreamT's stub lacks it): events keep their message.
        batches = stream.take_events(FORGET_BATCH_MAX, within=FORGET_WITHIN_S)  # type: ignore[attr-defined]
        async for events in batches:
            records = [record_of(event.message) for event in events]
            try:
                outcomes = await applied(records)
            except Exception as exc:  # as a failed batch: stop, never go on without it
                live.failure = exc
                log.exception("applying the forget requests from %s failed; stopping the "
                              "worker (they are applied again from the start on restart)",
                              records[0].position)
                live.request_stop("a forget request failed", failed=True)
                raise
            for outcome in outcomes:
                for hook in live.on_forgot:
                    hook(outcome)

    live.app.agent(ledger, name=f"{AGENT_NAME}-forget", concurrency=1)(forget)


def stop_eraser(live: LiveApp, drain_s: float = ERASER_DRAIN_S) -> None:
    """Stop the worker's eraser or auditor after it finished what is waiting (up to
    ``drain_s``)."""
    if live.forgetting is not None:
        live.forgetting.close(drain_s)
