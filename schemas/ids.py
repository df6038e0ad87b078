"""Event ids: UUIDv7 (RFC 9562), time-ordered, assigned by the producer."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_seq = 0


def uuid7(now_ms: int | None = None) -> uuid.UUID:
    """Return a new UUIDv7.

    48 bits of Unix milliseconds, then a 12-bit counter (monotonic within a millisecond in this
    process, RFC 9562 method 1), then 62 random bits.
    """
    global _last_ms, _seq
    with _lock:
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        if ms <= _last_ms:
            ms = _last_ms
            _seq += 1
            if _seq > 0xFFF:  # counter exhausted: borrow the next millisecond
                ms += 1
                _seq = 0
        else:
            _seq = int.from_bytes(os.urandom(2), "big") & 0x3FF  # leave headroom
        _last_ms = ms
        seq = _seq
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= seq << 64
    value |= 0b10 << 62
    value |= rand
    return uuid.UUID(int=value)


def is_uuid7(text: str) -> bool:
    """True when ``text`` is a canonical UUID string of version 7 and RFC 9562 variant."""
    try:
        parsed = uuid.UUID(text)
    except (ValueError, AttributeError, TypeError):
        return False
    return parsed.version == 7 and parsed.variant == uuid.RFC_4122 and str(parsed) == text


def uuid7_millis(text: str) -> int:
    """The Unix milliseconds embedded in a UUIDv7."""
    return uuid.UUID(text).int >> 80
