"""The async twin of :class:`memstack.client.MemoryClient`, on aiokafka."""

from __future__ import annotations

from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError

from memstack.builders import Defaults, EventBuilder
from memstack.client import EmitError, Written
from memstack.errors import BrokerUnavailableError
from memstack.schemas.events import Event, EventKind, ForgetScope, validate_event
from memstack.settings import Settings


class AsyncMemoryClient:
    """``async with AsyncMemoryClient(...) as c: await c.message("s1", "user", "hi")``.

    ``c.events`` builds events of every kind without sending them; ``await c.emit(event)``
    sends one and returns where the log put it.
    """

    def __init__(self, tenant: str, agent: str, *, settings: Settings | None = None,
                 source: str = "memstack-sdk", **producer_overrides: Any) -> None:
        self.events = EventBuilder(Defaults(tenant=tenant, agent=agent, source=source))
        self.settings = settings or Settings.from_env()
        config: dict[str, Any] = {
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": 5,
            "max_batch_size": 256 * 1024,
            **producer_overrides,
        }
        self._producer = AIOKafkaProducer(bootstrap_servers=self.settings.bootstrap, **config)

    async def start(self) -> None:
        try:
            await self._producer.start()
        except KafkaConnectionError as exc:
            raise BrokerUnavailableError(
                f"no Kafka broker at {self.settings.bootstrap}; start one with "
                "`memstack infra up` or set MEMSTACK_BOOTSTRAP"
            ) from exc

    async def emit(self, event: Event | dict[str, Any]) -> Written:
        """Validate, send and await the acknowledgement of one event."""
        if not isinstance(event, Event):
            event = validate_event(event)
        topic = (self.settings.forget_topic if event.kind is EventKind.FORGET_REQUESTED
                 else self.settings.events_topic)
        try:
            meta = await self._producer.send_and_wait(topic, event.to_json(), key=event.key)
        except KafkaError as exc:
            raise EmitError(f"event {event.event_id} was not acknowledged: {exc}") from exc
        return Written(event.event_id, meta.topic, meta.partition, meta.offset,
                       datetime.fromtimestamp(meta.timestamp / 1000, UTC))

    async def message(self, session: str, role: str, text: str, **env: Any) -> Written:
        return await self.emit(self.events.message(session, role, text, **env))

    async def fact(self, session: str, subject: str, relation: str, object: str,
                   **env: Any) -> Written:
        return await self.emit(self.events.fact(session, subject, relation, object, **env))

    async def forget(self, scope: ForgetScope | dict[str, Any], reason: str | None = None,
                     **env: Any) -> Written:
        return await self.emit(self.events.forget(scope, reason, **env))

    async def flush(self) -> None:
        await self._producer.flush()

    async def close(self) -> None:
        await self._producer.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
