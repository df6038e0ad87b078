"""Build events of each kind from keyword arguments: shared by the sync and async clients."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event, EventKind, ForgetScope, now_utc, validate_event
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
        for name in ("subject", "valid_from", "valid_to"):
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

