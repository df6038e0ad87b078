"""Seal and open event payloads with AES-256-GCM (``cryptography``).

``seal(event, keys)`` encrypts the payload (and the metadata, when the event has any) with
the data key of the event's (tenant, session, subject) scope; ``open_record(raw, keys)``
validates a record of the log and returns the plain event, or :class:`Shredded` when its key
was destroyed by a forget request.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic_core import to_json

from memstack.foundation.keystore import KeyScope, KeyStore
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event, decode_json, validate_event
from memstack.schemas.sealed import SealedEvent, envelope_bytes_of, parse_record

ALG = "AES-256-GCM"
HOLDS_METADATA = "payload+metadata"
"""``sealed.holds`` of an event whose ciphertext holds its metadata beside the payload."""


@dataclass(frozen=True)
class Shredded:
    """A sealed record whose data key no longer exists: its payload is gone for good."""

    envelope: SealedEvent


def scope_of(event: Event | SealedEvent) -> KeyScope:
    return KeyScope(event.tenant, event.session, event.subject)


def seal_record(event: Event, keys: KeyStore) -> bytes:
    """The log record of ``event`` sealed: its canonical envelope with ``sealed`` in place of
    the payload, the bytes :meth:`SealedEvent.to_json` gives.

    Written as bytes, not through the model: the envelope's canonical JSON is the ciphertext's
    associated data anyway, and building and validating a ``SealedEvent`` per event was most
    of sealing's cost on every client's hot path (tests/memstack/test_sealing.py checks the
    bytes parse back to themselves)."""
    key_id, key = keys.current(scope_of(event))
    nonce = os.urandom(12)
    envelope = envelope_bytes_of(event)
    payload = event.payload.model_dump_json(exclude_none=True).encode()
    plaintext = payload if event.metadata is None else b"".join(
        (b'{"metadata":', to_json(event.metadata), b',"payload":', payload, b"}"))
    ct = AESGCM(key).encrypt(nonce, plaintext, envelope)
    fields = {"alg": ALG, "key_id": key_id, "nonce": _b64(nonce), "ct": _b64(ct)}
    if event.metadata is not None:
        fields["holds"] = HOLDS_METADATA
    sealed = to_json(fields)
    return b"".join((envelope[:-1], b',"sealed":', sealed, b"}"))


def seal(event: Event, keys: KeyStore) -> SealedEvent:
    """``event`` sealed, as the validated model of :func:`seal_record`'s bytes."""
    return SealedEvent.model_validate_json(seal_record(event, keys))


def open_sealed(sealed: SealedEvent, keys: KeyStore, raw: bytes | None = None) -> Event | Shredded:
    key = keys.get(sealed.sealed.key_id)
    if key is None:
        return Shredded(sealed)
    try:
        plaintext = AESGCM(key).decrypt(
            base64.b64decode(sealed.sealed.nonce), base64.b64decode(sealed.sealed.ct),
            sealed.envelope_bytes(),
        )
    except (InvalidTag, ValueError) as exc:
        raise InvalidEventError("sealed", "ciphertext does not authenticate under its key and "
                                "envelope (tampered or wrong key)", raw=raw) from exc
    data = sealed.model_dump(exclude={"sealed"})
    opened = decode_json(plaintext)
    if sealed.sealed.holds == HOLDS_METADATA:
        if not isinstance(opened, dict) or set(opened) != {"metadata", "payload"}:
            raise InvalidEventError("sealed", "a ciphertext that holds payload+metadata must "
                                    "open to an object of exactly those two", raw=raw)
        data["metadata"], opened = opened["metadata"], opened["payload"]
    data["payload"] = opened
    return validate_event(data, raw=raw)


def open_record(raw: bytes, keys: KeyStore | None) -> Event | Shredded:
    """Validate a record of the log and open it if sealed.

    Raises :class:`InvalidEventError` for malformed input, and for a sealed record when no key
    store is configured (it cannot be read here: configure ``MEMSTACK_HOME``'s key store).
    """
    parsed = parse_record(raw)
    if isinstance(parsed, Event):
        return parsed
    if keys is None:
        raise InvalidEventError("sealed", "sealed event but no key store is configured", raw=raw)
    return open_sealed(parsed, keys, raw)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
