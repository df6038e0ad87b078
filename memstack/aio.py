"""The async twin of :class:`memstack.client.MemoryClient`, on the same core.

It builds, validates, routes and seals events exactly as the sync client does (one
:class:`~memstack.foundation.builders.EventBuilder` and one
:class:`~memstack.foundation.builders.LogEncoder`), and produces with the same idempotent
``acks=all`` kafka-python producer, whose acknowledgements are bridged onto the event loop.
So it needs nothing beyond the core install.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, Self

from kafka import KafkaProducer
from kafka.errors import KafkaError

from memstack.client import Written, not_acknowledged, open_producer, written_of
from memstack.foundation.builders import (
    Defaults,
    EventBuilder,
    EventHelpers,
    LogEncoder,
    OutgoingRecord,
    checked_all,
)
from memstack.foundation.keystore import KeyStore
from memstack.foundation.settings import Settings
from memstack.foundation.telemetry import maybe, memory_tracer
from memstack.schemas.events import Event, ForgetScope


class AsyncMemoryClient(EventHelpers[Coroutine[Any, Any, Written]]):
    """``async with AsyncMemoryClient(...) as c: await c.message("s1", "user", "hi")``.

    The helpers (``message``, ``tool_call``, ``tool_result``, ``observation``, ``note``,
    ``fact``, ``retract``, ``forget``) are coroutines returning where the log put the event.
    ``c.events`` builds events of every kind without sending them; ``await c.emit(event)``
    sends one and returns where the log put it. Unless ``MEMSTACK_SEAL=0`` (or with ``keys``)
    payloads are sealed as :class:`~memstack.client.MemoryClient` seals them.
    """

    def __init__(self, tenant: str, agent: str, *, settings: Settings | None = None,
                 source: str = "memstack-sdk", keys: KeyStore | None = None,
                 tracer_provider: Any = None, **producer_overrides: Any) -> None:
        self.events = EventBuilder(Defaults(tenant=tenant, agent=agent, source=source))
        self.tracer = memory_tracer(tracer_provider)
        self.settings = settings or Settings.from_env()
        self.encoder = LogEncoder(self.settings, keys)
        self.keys = self.encoder.keys
        self._overrides = producer_overrides
        self._producer: KafkaProducer | None = None

    async def start(self) -> None:
        """Connect to the broker (raises ``BrokerUnavailableError`` when none answers)."""
        if self._producer is None:
            self._producer = await asyncio.to_thread(open_producer, self.settings,
                                                     self._overrides)

    async def emit(self, event: Event | dict[str, Any]) -> Written:
        """Validate, send and await the acknowledgement of one event."""
        with maybe(self.tracer, lambda t: t.write_span(None, [event])):
            record = self.encoder.encode(event)
            return await self._acknowledged(record.event.event_id, await self._submit(record))

    async def emit_many(self, events: Sequence[Event | dict[str, Any]]) -> list[Written]:
        """Send a batch in order (all validated first), then await every acknowledgement."""
        checked = checked_all(events)
        with maybe(self.tracer, lambda t: t.write_span(None, checked)):
            records = [self.encoder.encode(e) for e in checked]
            acks = [await self._submit(r) for r in records]  # in order: a session stays ordered
            return [await self._acknowledged(r.event.event_id, a)
                    for r, a in zip(records, acks, strict=True)]

    async def _submit(self, record: OutgoingRecord) -> asyncio.Future[Any]:
        """Hand one record to the producer; the future settles with its acknowledgement.

        Before a forget request, every record sent so far is flushed, so the request covers it
        (as :meth:`memstack.client.MemoryClient.emit` does)."""
        producer = self._started()
        loop = asyncio.get_running_loop()
        if record.is_forget:
            await asyncio.to_thread(producer.flush)
        acked: asyncio.Future[Any] = loop.create_future()
        try:
            future = await asyncio.to_thread(producer.send, record.topic, key=record.key,
                                             value=record.value)
        except KafkaError as exc:  # e.g. an ACL denial, raised before anything is sent
            raise not_acknowledged(record.event.event_id, exc,
                                   self.settings.kafka_security) from exc
        future.add_callback(lambda meta: loop.call_soon_threadsafe(_settle, acked, meta, None))
        future.add_errback(lambda exc: loop.call_soon_threadsafe(_settle, acked, None, exc))
        return acked

    async def _acknowledged(self, event_id: str, acked: asyncio.Future[Any]) -> Written:
        try:
            meta = await acked
        except Exception as exc:
            raise not_acknowledged(event_id, exc, self.settings.kafka_security) from exc
        return written_of(event_id, meta)

    def _send(self, event: Event) -> Coroutine[Any, Any, Written]:
        return self.emit(event)

    async def forget(self, scope: ForgetScope | dict[str, Any], reason: str | None = None,
                     **env: Any) -> Written:
        return await self.emit(self.events.forget(scope, reason, **env))

    async def flush(self) -> None:
        """Wait until every sent event is acknowledged."""
        await asyncio.to_thread(self._started().flush)

    async def close(self, timeout: float = 30.0) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await asyncio.to_thread(producer.flush, timeout)
            await asyncio.to_thread(producer.close, timeout)

    def _started(self) -> KafkaProducer:
        if self._producer is None:
            raise RuntimeError("AsyncMemoryClient is not started: use `async with` or "
                               "`await client.start()` first")
        return self._producer

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


def _settle(acked: asyncio.Future[Any], meta: Any, exc: BaseException | None) -> None:
    if acked.done():  # the awaiting task was cancelled
        return
    if exc is not None:
        acked.set_exception(exc)
    else:
        acked.set_result(meta)
