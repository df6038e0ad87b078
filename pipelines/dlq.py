"""The dead-letter format of ``<prefix>.dlq``: bad records are data, kept with their reason.

One DLQ record per event that failed validation:

- key: ``b"{partition}:{offset}"`` of the source record (the same source record always gets the
  same key, so a dead letter that was sent twice after a crash is recognisable);
- value: UTF-8 JSON ``{"reason", "field", "source_topic", "source_partition", "source_offset",
  "key_b64", "value_b64", "format"}`` with the original key and value bytes in base64 (``null``
  when the source had none);
- headers: the same facts for consumers that only read headers: ``memstack.dlq.reason``,
  ``memstack.dlq.field``, ``memstack.dlq.source_topic``, ``memstack.dlq.source_partition``,
  ``memstack.dlq.source_offset``, ``memstack.dlq.format``.

A source key or value over :data:`KEPT_BYTES` is kept truncated to its first
:data:`KEPT_BYTES` bytes, with ``"value_truncated": true``, ``"value_bytes"`` (its length) and
``"value_sha256"`` (``key_...`` likewise); the whole record stays in the source topic at its
offset. Without the limit, a record near the events topic's size limit (1 MiB) became a dead
letter a third larger in base64, which the broker refused: the worker stopped on it at every
restart (found by ``memstack eval faults``' fuzz run).

Dead letters are delivered at least once: the engine waits for the broker's acknowledgement
before it commits the batch, so a crash in between sends them again on restart.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from memstack.foundation.errors import MemstackError
from memstack.pipelines.contracts import DeadLetter

DLQ_FORMAT = "memstack.dlq/1"
HEADER_PREFIX = "memstack.dlq."


class DeadLetterFormatError(MemstackError):
    """A DLQ record does not follow ``memstack.dlq/1``; it was not written by memstack."""


@dataclass(frozen=True)
class DlqRecord:
    """A dead letter as it goes on the wire."""

    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


def _b64(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode("ascii")


KEPT_BYTES = 256 * 1024
"""Of a source key or value, the bytes a dead letter keeps (base64 makes them a third larger)."""


def _kept(name: str, raw: bytes | None) -> dict[str, Any]:
    """``<name>_b64`` of ``raw``, truncated to :data:`KEPT_BYTES` with its length and hash."""
    if raw is None or len(raw) <= KEPT_BYTES:
        return {f"{name}_b64": _b64(raw)}
    return {f"{name}_b64": _b64(raw[:KEPT_BYTES]), f"{name}_truncated": True,
            f"{name}_bytes": len(raw), f"{name}_sha256": hashlib.sha256(raw).hexdigest()}


def encode(letter: DeadLetter) -> DlqRecord:
    """The DLQ record for one dead letter."""
    body = {
        "format": DLQ_FORMAT,
        "reason": letter.reason,
        "field": letter.field,
        "source_topic": letter.source_topic,
        "source_partition": letter.partition,
        "source_offset": letter.offset,
        **_kept("key", letter.key),
        **_kept("value", letter.value),
    }
    facts = {
        "reason": letter.reason,
        "field": letter.field,
        "source_topic": letter.source_topic,
        "source_partition": str(letter.partition),
        "source_offset": str(letter.offset),
        "format": DLQ_FORMAT,
    }
    headers = [(HEADER_PREFIX + name, value.encode("utf-8")) for name, value in facts.items()]
    key = f"{letter.partition}:{letter.offset}".encode("ascii")
    return DlqRecord(key, json.dumps(body, sort_keys=True).encode("utf-8"), headers)


def decode(value: bytes) -> DeadLetter:
    """Read a DLQ record's value back into a :class:`DeadLetter` (original bytes restored)."""
    try:
        body: dict[str, Any] = json.loads(value)
        if body.get("format") != DLQ_FORMAT:
            raise DeadLetterFormatError(
                f"DLQ record has format {body.get('format')!r}, expected {DLQ_FORMAT!r}")
        return DeadLetter(
            source_topic=str(body["source_topic"]),
            partition=int(body["source_partition"]),
            offset=int(body["source_offset"]),
            key=_unb64(body.get("key_b64")),
            value=_unb64(body.get("value_b64")),
            reason=str(body["reason"]),
            field=str(body["field"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise DeadLetterFormatError(
            f"not a memstack DLQ record ({exc}); read it as raw bytes instead") from exc


def _unb64(text: object) -> bytes | None:
    if text is None:
        return None
    return base64.b64decode(str(text), validate=True)
