"""Crypto-shredding for forget requests: which data keys a request destroys, and when.

A request covers what was logged no later than itself, so it destroys the keys of its scope
that existed by then; keys created afterwards seal new data and stay. The emitting side rotates
at request time (:func:`rotate_before_request` *retires* the scope's live keys before the
request is sent: they stay readable but seal no more), so events sealed after the request use
a fresh key; the processor then destroys every key of the scope, retired or live, created no
later than the request. Destruction waits for the request to be in the log: a request that
never got there destroys nothing.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

# the rotation lives with the key store (client-side, light)
from memstack.foundation.keystore import (
    FileKeyStore,
    KeyScope,
    KeyStore,
    rotate_before_request,
    scope_args,
)
from memstack.operators.forget import ForgetRequest

log = logging.getLogger(__name__)

__all__ = ["created_at", "destroy_for", "rotate_before_request", "scope_args"]


def created_at(key_id: str) -> datetime | None:
    """The creation time in a :class:`FileKeyStore` key id (``...#<uuid7 hex, 16>``)."""
    _, _, tail = key_id.rpartition("#")
    try:
        return datetime.fromtimestamp(int(tail[:12], 16) / 1000, UTC)
    except ValueError:
        return None


def destroy_for(keys: KeyStore, request: ForgetRequest) -> list[str]:
    """Destroy the keys of the request's scope created no later than the request."""
    if not request.destroys_keys:
        return []
    session, subject = scope_args(request.scope)
    if not isinstance(keys, FileKeyStore):
        return keys.destroy(request.tenant, session=session, subject=subject)
    # FileKeyStore internals: the KeyStore protocol has no time-bounded destroy yet.
    old = [(key_id, scope) for key_id, scope, _ in keys._scan(request.tenant, retired=True)
           if scope.matches(request.tenant, session, subject)
           and (t := created_at(key_id)) is not None and t <= request.log_time]
    destroyed: list[str] = []
    for key_id, scope in old:
        destroyed += _destroy_exact(keys, key_id, scope)
    return destroyed


def _destroy_exact(keys: FileKeyStore, key_id: str, scope: KeyScope) -> list[str]:
    """Shred one key file (``KeyStore.destroy`` takes no time bound yet: see docs/forget.md)."""
    from memstack.foundation.keystore import RETIRED, _shred

    path = keys._path(key_id, scope.tenant)
    if not path.exists() and not path.with_suffix(RETIRED).exists():
        return []
    _shred(path)
    _shred(path.with_suffix(RETIRED))
    keys._live = {s: v for s, v in keys._live.items() if v[0] != key_id}
    log.info("destroyed data key %s", key_id)
    return [key_id]
