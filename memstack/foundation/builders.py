"""The one core of every client: build events from keyword arguments, validate, seal.

:class:`EventBuilder` turns helper calls into validated events; :class:`LogEncoder` turns an
event into the record the log gets (its topic, key and bytes, sealed unless ``MEMSTACK_SEAL=0``).
``MemoryClient`` and ``AsyncMemoryClient`` write through both; ``MemoryService`` builds with
the same :class:`EventBuilder` and posts the events to the service, which seals them there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from memstack.foundation.keystore import FileKeyStore, KeyStore, rotate_before_request
from memstack.foundation.settings import Settings
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import (
    Event,
    EventKind,
    ForgetRequestedPayload,
    ForgetScope,
    now_utc,
    validate_event,
)
from memstack.schemas.ids import uuid7


@dataclass(frozen=True)
class Defaults:
    """Envelope fields a client fills in when a helper does not name them."""

    tenant: str
    agent: str
    source: str = "memstack-sdk"
    authority: str = "agent"


class EventBuilder:
    """Turns helper calls (``message``, ``fact``, ``forget`` ...) into validated events."""

    def __init__(self, defaults: Defaults) -> None:
        self.defaults = defaults

    def build(self, kind: EventKind, session: str, payload: dict[str, Any], **env: Any) -> Event:
        data: dict[str, Any] = {
            "event_id": env.pop("event_id", None) or str(uuid7()),
            "tenant": env.pop("tenant", None) or self.defaults.tenant,
            "agent": env.pop("agent", None) or self.defaults.agent,
            "session": session,
            "kind": kind.value,
            "occurred_at": env.pop("occurred_at", None) or now_utc(),
            "provenance": {
                "source": env.pop("source", None) or self.defaults.source,
                "authority": env.pop("authority", None) or self.defaults.authority,
            },
            "payload": {k: v for k, v in payload.items() if v is not None},
        }
        for name in ("subject", "valid_from", "valid_to", "metadata"):
            value = env.pop(name, None)
            if value is not None:
                data[name] = value
        if env:
            raise InvalidEventError(next(iter(env)), "unknown envelope field")
        return validate_event(data)

    def message(self, session: str, role: str, text: str, **env: Any) -> Event:
        return self.build(EventKind.MESSAGE, session, {"role": role, "text": text}, **env)

    def tool_call(self, session: str, tool: str, call_id: str,
                  arguments: dict[str, Any] | None = None, **env: Any) -> Event:
        payload = {"tool": tool, "call_id": call_id, "arguments": arguments or {}}
        return self.build(EventKind.TOOL_CALL, session, payload, **env)

    def tool_result(self, session: str, tool: str, call_id: str, output: str,
                    is_error: bool = False, **env: Any) -> Event:
        payload = {"tool": tool, "call_id": call_id, "output": output, "is_error": is_error}
        return self.build(EventKind.TOOL_RESULT, session, payload, **env)

    def observation(self, session: str, text: str, **env: Any) -> Event:
        return self.build(EventKind.OBSERVATION, session, {"text": text}, **env)

    def note(self, session: str, text: str, **env: Any) -> Event:
        return self.build(EventKind.NOTE, session, {"text": text}, **env)

    def fact(self, session: str, subject: str, relation: str, object: str,
             valid_from: datetime | None = None, valid_to: datetime | None = None,
             **env: Any) -> Event:
        return self.build(
            EventKind.FACT_ASSERTED, session, {"relation": relation, "object": object},
            subject=subject, valid_from=valid_from, valid_to=valid_to, **env,
        )

    def retract(self, session: str, subject: str, relation: str, object: str | None = None,
                valid_from: datetime | None = None, **env: Any) -> Event:
        return self.build(
            EventKind.FACT_RETRACTED, session, {"relation": relation, "object": object},
            subject=subject, valid_from=valid_from, **env,
        )

    def forget(self, scope: ForgetScope | dict[str, Any], reason: str | None = None,
               session: str = "_forget", **env: Any) -> Event:
        scope_data = (scope.model_dump(exclude_none=True) if isinstance(scope, ForgetScope)
                      else scope)
        return self.build(
            EventKind.FORGET_REQUESTED, session, {"scope": scope_data, "reason": reason}, **env
        )



R = TypeVar("R")


class EventHelpers(Generic[R]):
    """One helper per event kind that builds with ``self.events`` and hands the event to
    ``_send``: what a send returns (``R``) is the client's own (a receipt, an awaitable ...).
    """

    events: EventBuilder

    def _send(self, event: Event) -> R:
        raise NotImplementedError

    def message(self, session: str, role: str, text: str, **env: Any) -> R:
        return self._send(self.events.message(session, role, text, **env))

    def tool_call(self, session: str, tool: str, call_id: str,
                  arguments: dict[str, Any] | None = None, **env: Any) -> R:
        return self._send(self.events.tool_call(session, tool, call_id, arguments, **env))

    def tool_result(self, session: str, tool: str, call_id: str, output: str,
                    is_error: bool = False, **env: Any) -> R:
        return self._send(self.events.tool_result(session, tool, call_id, output, is_error,
                                                  **env))

    def observation(self, session: str, text: str, **env: Any) -> R:
        return self._send(self.events.observation(session, text, **env))

    def note(self, session: str, text: str, **env: Any) -> R:
        return self._send(self.events.note(session, text, **env))

    def fact(self, session: str, subject: str, relation: str, object: str,
             valid_from: datetime | None = None, valid_to: datetime | None = None,
             **env: Any) -> R:
        return self._send(self.events.fact(session, subject, relation, object, valid_from,
                                           valid_to, **env))

    def retract(self, session: str, subject: str, relation: str, object: str | None = None,
                valid_from: datetime | None = None, **env: Any) -> R:
        return self._send(self.events.retract(session, subject, relation, object, valid_from,
                                              **env))


def checked(event: Event | dict[str, Any]) -> Event:
    """An event as given, or a dict validated into one (raises ``InvalidEventError``)."""
    return event if isinstance(event, Event) else validate_event(event)


def checked_all(events: Sequence[Event | dict[str, Any]]) -> list[Event]:
    """Validate a whole batch before any of it is sent."""
    return [checked(e) for e in events]


@dataclass(frozen=True)
class OutgoingRecord:
    """What the log gets for one event: the topic, the key (tenant/session) and the bytes."""

    event: Event
    topic: str
    key: bytes
    value: bytes

    @property
    def is_forget(self) -> bool:
        """A forget request: a client flushes what it sent before sending one (see
        :meth:`memstack.client.MemoryClient.emit`)."""
        return self.event.kind is EventKind.FORGET_REQUESTED


class LogEncoder:
    """Route and encode events for the log; with a key store, seal their payloads.

    Forget requests go to ``<prefix>.forget`` unsealed; before one is encoded, the keys of its
    scope are retired (they still open what they sealed, and the forget processor destroys them
    when it applies the request), so later events of the scope are sealed with a fresh key.
    """

    def __init__(self, settings: Settings, keys: KeyStore | None = None) -> None:
        self.settings = settings
        if keys is None and settings.seal:  # sealed by default: the deployment's key store
            keys = FileKeyStore(settings.keys_dir)
        self.keys = keys

    def encode(self, event: Event | dict[str, Any]) -> OutgoingRecord:
        event = checked(event)
        if event.kind is EventKind.FORGET_REQUESTED:
            if self.keys is not None and isinstance(event.payload, ForgetRequestedPayload):
                rotate_before_request(self.keys, event.tenant, event.payload.scope)
            return OutgoingRecord(event, self.settings.forget_topic, event.key, event.to_json())
        if self.keys is None:
            return OutgoingRecord(event, self.settings.events_topic, event.key, event.to_json())
        from memstack.foundation.sealing import seal_record  # cryptography: only when sealing

        return OutgoingRecord(event, self.settings.events_topic, event.key,
                              seal_record(event, self.keys))
