"""The event envelope and its kinds: the wire contract of ``memstack.events``.

Events are JSON on the wire (UTF-8, one object per Kafka record) so any Kafka client can
produce them; ``schemas/event.v<N>.json`` is the JSON Schema of each version. Inside the
process they are frozen pydantic models: immutable, validated once at the edge.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from memstack.schemas.errors import InvalidEventError
from memstack.schemas.ids import is_uuid7
from memstack.schemas.metadata import MetadataField

SCHEMA_VERSION = 1
"""The version this code writes. Readers accept every version up to it (see compatibility)."""

Name = Annotated[str, StringConstraints(min_length=1, max_length=256, strip_whitespace=False)]
Text = Annotated[str, StringConstraints(max_length=1_000_000)]


class EventKind(StrEnum):
    """What happened. Past-tense domain names map to these wire values."""

    MESSAGE = "message"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    OBSERVATION = "observation"
    NOTE = "note"
    FACT_ASSERTED = "fact_asserted"
    FACT_RETRACTED = "fact_retracted"
    FORGET_REQUESTED = "forget_requested"


TEXT_KINDS = frozenset(
    {EventKind.MESSAGE, EventKind.TOOL_CALL, EventKind.TOOL_RESULT, EventKind.OBSERVATION,
     EventKind.NOTE}
)
"""Kinds that become an immutable raw record (and a memory row when they carry text)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)


class Provenance(_Frozen):
    """Where an event came from and how much to trust it."""

    source: Name
    authority: Literal["user", "agent", "tool", "system", "import"] = "agent"


class MessagePayload(_Frozen):
    role: Literal["user", "assistant", "system"]
    text: Text


class ToolCallPayload(_Frozen):
    tool: Name
    call_id: Name
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolResultPayload(_Frozen):
    tool: Name
    call_id: Name
    output: Text
    is_error: bool = False


class ObservationPayload(_Frozen):
    text: Text


class NotePayload(_Frozen):
    text: Text


class FactAssertedPayload(_Frozen):
    """``(subject, relation, object)``; the subject is the envelope's ``subject``."""

    relation: Name
    object: Text


class FactRetractedPayload(_Frozen):
    """Ends the validity of a fact from ``valid_from`` (or ``occurred_at``) on.

    ``object`` names the value for a multi-valued relation; for a single-valued relation it may
    be omitted (the current value is retracted).
    """

    relation: Name
    object: Text | None = None


class ForgetScope(_Frozen):
    """What a forget request erases."""

    type: Literal["event", "session", "subject", "tenant", "fact"]
    event_id: str | None = None
    session: Name | None = None
    subject: Name | None = None
    relation: Name | None = None
    object: Text | None = None

    @model_validator(mode="after")
    def _fields_for_type(self) -> Self:
        needed = {
            "event": ("event_id",),
            "session": ("session",),
            "subject": ("subject",),
            "tenant": (),
            "fact": ("subject", "relation"),
        }[self.type]
        for name in needed:
            if getattr(self, name) is None:
                raise ValueError(f"scope type '{self.type}' requires '{name}'")
        if self.event_id is not None and not is_uuid7(self.event_id):
            raise ValueError("event_id must be a canonical UUIDv7 string")
        return self


class ForgetRequestedPayload(_Frozen):
    scope: ForgetScope
    reason: Text | None = None


Payload = (
    MessagePayload
    | ToolCallPayload
    | ToolResultPayload
    | ObservationPayload
    | NotePayload
    | FactAssertedPayload
    | FactRetractedPayload
    | ForgetRequestedPayload
)

PAYLOAD_MODELS: dict[EventKind, type[BaseModel]] = {
    EventKind.MESSAGE: MessagePayload,
    EventKind.TOOL_CALL: ToolCallPayload,
    EventKind.TOOL_RESULT: ToolResultPayload,
    EventKind.OBSERVATION: ObservationPayload,
    EventKind.NOTE: NotePayload,
    EventKind.FACT_ASSERTED: FactAssertedPayload,
    EventKind.FACT_RETRACTED: FactRetractedPayload,
    EventKind.FORGET_REQUESTED: ForgetRequestedPayload,
}

_KIND_VALUES = frozenset(k.value for k in EventKind)


def utc(value: datetime) -> datetime:
    """Normalise an aware datetime to UTC; reject naive ones."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("must be timezone-aware (UTC); naive datetimes are ambiguous")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # year 1 east of UTC, or 9999 west of it
        raise ValueError(f"{value.isoformat()} is out of range once taken to UTC "
                         "(before 0001-01-01 or after 9999-12-31); give a UTC time") from None


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds and a ``Z``.

    Event times on the wire are written by pydantic's own (Rust) serializer, which gives the
    same form for UTC times (``...T03:04:05.678901Z``; the fraction is left out when it is
    zero); it is several microseconds per event faster than a Python field serializer.
    """
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Envelope(_Frozen):
    """The fields every record of ``memstack.events`` carries in the clear."""

    schema_version: int = SCHEMA_VERSION
    event_id: str
    tenant: Name
    agent: Name
    session: Name
    subject: Name | None = None
    kind: EventKind
    occurred_at: datetime
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    provenance: Provenance

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if not 1 <= value <= SCHEMA_VERSION:
            raise ValueError(
                f"unsupported schema_version {value}; this reader knows 1..{SCHEMA_VERSION}"
            )
        return value

    @field_validator("event_id")
    @classmethod
    def _event_id_is_uuid7(cls, value: str) -> str:
        if not is_uuid7(value):
            raise ValueError("must be a canonical lower-case UUIDv7 string")
        return value

    @field_validator("occurred_at", "valid_from", "valid_to")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        return None if value is None else utc(value)

    @model_validator(mode="after")
    def _rules(self) -> Self:
        if self.valid_from and self.valid_to and self.valid_from >= self.valid_to:
            raise ValueError("valid_from must be before valid_to")
        if self.kind in (EventKind.FACT_ASSERTED, EventKind.FACT_RETRACTED) and not self.subject:
            raise ValueError(f"kind '{self.kind}' requires 'subject'")
        return self

    @property
    def key(self) -> bytes:
        """The Kafka key: tenant/session, so one session stays ordered on one partition."""
        return f"{self.tenant}/{self.session}".encode()

    @property
    def valid_start(self) -> datetime:
        """Start of validity: the explicit ``valid_from`` or else ``occurred_at``."""
        return self.valid_from or self.occurred_at

    def to_json(self) -> bytes:
        """Canonical wire bytes: fixed field order, no nulls, compact separators."""
        return self.model_dump_json(exclude_none=True).encode()


class Event(Envelope):
    """One immutable event: the envelope around a kind-specific payload, and optional
    ``metadata`` (:mod:`memstack.schemas.metadata`; sealed with the payload)."""

    payload: Payload
    metadata: MetadataField | None = None

    @model_validator(mode="before")
    @classmethod
    def _payload_for_kind(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kind, payload = data.get("kind"), data.get("payload")
        if not isinstance(kind, str) or kind not in _KIND_VALUES:
            return data  # the field validator reports the unknown kind (or its wrong type)
        model = PAYLOAD_MODELS[EventKind(kind)]
        if isinstance(payload, dict):
            data = {**data, "payload": model.model_validate(payload)}
        elif payload is not None and not isinstance(payload, model):
            raise ValueError(f"payload of kind '{kind}' must be a {model.__name__}")
        return data

    def text(self) -> str | None:
        """The text a memory row embeds, or None for kinds without text."""
        p = self.payload
        if isinstance(p, (MessagePayload, ObservationPayload, NotePayload)):
            return p.text
        if isinstance(p, ToolResultPayload):
            return p.output
        if isinstance(p, ToolCallPayload):
            return f"{p.tool}({json.dumps(p.arguments, sort_keys=True, ensure_ascii=False)})"
        if isinstance(p, FactAssertedPayload):
            return f"{self.subject} {p.relation} {p.object}"
        return None


def decode_json(raw: bytes | str) -> Any:
    """``json.loads`` for records from the wire: every failure is an :class:`InvalidEventError`
    (invalid UTF-8 or JSON, and nesting deeper than the parser's stack, whose
    ``RecursionError`` would otherwise stop a consumer on the record at every restart)."""
    raw_bytes = raw if isinstance(raw, bytes) else None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidEventError("$", f"not valid UTF-8 JSON: {exc}", raw=raw_bytes) from exc
    except RecursionError as exc:  # hostile input, not a bug of the reader
        raise InvalidEventError("$", "JSON nested too deeply to parse", raw=raw_bytes) from exc


def parse_event(raw: bytes | str | dict[str, Any]) -> Event:
    """Validate wire bytes (or a decoded object) into an :class:`Event`.

    Raises :class:`InvalidEventError` naming the first failing field and its rule.
    """
    raw_bytes = raw if isinstance(raw, bytes) else None
    data = decode_json(raw) if isinstance(raw, (bytes, str)) else raw
    if not isinstance(data, dict):
        raise InvalidEventError("$", "an event must be a JSON object", raw=raw_bytes)
    return validate_event(data, raw=raw_bytes)


def validate_event(data: dict[str, Any], *, raw: bytes | None = None) -> Event:
    """Validate a decoded event; errors name the dotted field path (``payload.role``)."""
    kind = data.get("kind")
    known = isinstance(kind, str) and kind in _KIND_VALUES  # a list or object is unhashable
    model = PAYLOAD_MODELS.get(EventKind(str(kind))) if known else None
    payload = data.get("payload")
    if model is not None and isinstance(payload, dict):
        try:
            data = {**data, "payload": model.model_validate(payload)}
        except ValidationError as exc:
            raise _first_error(exc, raw, prefix="payload") from exc
    try:
        return Event.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, raw) from exc


def _first_error(exc: ValidationError, raw: bytes | None, prefix: str = "") -> InvalidEventError:
    err = exc.errors(include_url=False)[0]
    parts = [prefix] if prefix else []
    parts += [str(p) for p in err.get("loc", ())]
    loc = ".".join(parts) or "$"
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return InvalidEventError(loc, msg, raw=raw)


def now_utc() -> datetime:
    return datetime.now(UTC)
