"""Seal and open event payloads with AES-256-GCM (``cryptography``).

``seal(event, keys)`` encrypts the payload with the data key of the event's
(tenant, session, subject) scope; ``open_record(raw, keys)`` validates a record of the log and
returns the plain event, or :class:`Shredded` when its key was destroyed by a forget request.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from memstack.foundation.keystore import KeyScope, KeyStore
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event, decode_json, validate_event
from memstack.schemas.sealed import SealedEvent, SealedPayload, envelope_bytes_of, parse_record


@dataclass(frozen=True)
class Shredded:
    """A sealed record whose data key no longer exists: its payload is gone for good."""

    envelope: SealedEvent


def scope_of(event: Event | SealedEvent) -> KeyScope:
    return KeyScope(event.tenant, event.session, event.subject)


def seal(event: Event, keys: KeyStore) -> SealedEvent:
    key_id, key = keys.current(scope_of(event))
    nonce = os.urandom(12)
    plaintext = event.payload.model_dump_json(exclude_none=True).encode()
    ct = AESGCM(key).encrypt(nonce, plaintext, envelope_bytes_of(event))
    sealed = SealedPayload(key_id=key_id, nonce=_b64(nonce), ct=_b64(ct))
    envelope = event.model_dump(exclude={"payload"})
    return SealedEvent.model_validate({**envelope, "sealed": sealed})


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
    data["payload"] = decode_json(plaintext)
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
