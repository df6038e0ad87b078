"""Sealed events: the payload encrypted with a per-scope data key (crypto-shredding).

On the wire a sealed event is the same envelope with ``sealed`` in place of ``payload`` (and
of ``metadata``)::

    {..., "kind": "message", "sealed": {"alg": "AES-256-GCM", "key_id": "...",
                                       "nonce": "<base64>", "ct": "<base64>"}}

The ciphertext is the canonical JSON of the payload; for an event with metadata it is
``{"metadata": {...}, "payload": {...}}`` and ``sealed`` says so (``"holds":
"payload+metadata"``), so metadata, which may be as personal as the payload, is never in the
clear in the log. The associated data is the canonical JSON of the envelope, so a ciphertext
cannot be moved to another envelope. Destroying the data
key (a forget request) makes the payload unreadable in every copy of the log.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ValidationError

from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import (
    Envelope,
    Event,
    _first_error,
    _Frozen,
    decode_json,
    validate_event,
)


class SealedPayload(_Frozen):
    alg: Literal["AES-256-GCM"] = "AES-256-GCM"
    key_id: str
    nonce: str
    ct: str
    holds: Literal["payload+metadata"] | None = None
    """What the ciphertext holds: the payload alone (absent) or payload and metadata."""


class SealedEvent(Envelope):
    """An event whose payload is encrypted; open it with :mod:`memstack.foundation.sealing`."""

    sealed: SealedPayload

    def envelope_bytes(self) -> bytes:
        """The associated data of the ciphertext: the canonical envelope without ``sealed``."""
        return self.model_dump_json(exclude_none=True, exclude={"sealed"}).encode()


def envelope_bytes_of(event: Event) -> bytes:
    """The associated data for sealing ``event``: the same bytes its sealed form will carry."""
    return event.model_dump_json(exclude_none=True, exclude={"payload", "metadata"}).encode()


def parse_record(raw: bytes) -> Event | SealedEvent:
    """Validate one record of ``memstack.events``: a plain event or a sealed one."""
    data = decode_json(raw)
    if not isinstance(data, dict):
        raise InvalidEventError("$", "an event must be a JSON object", raw=raw)
    if "sealed" not in data:
        return validate_event(data, raw=raw)
    if "payload" in data:
        raise InvalidEventError("sealed", "a sealed event carries no clear payload", raw=raw)
    return _validate_sealed(data, raw)


def _validate_sealed(data: dict[str, Any], raw: bytes) -> SealedEvent:
    try:
        return SealedEvent.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, raw) from exc
