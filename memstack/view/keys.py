"""Tenant-scoped API keys for the HTTP service, from configuration only (never in code).

``MEMSTACK_API_KEYS="key1:tenantA,key2:tenantB"`` or ``MEMSTACK_API_KEYS_FILE=/path`` (one
``key:tenant`` per line, ``#`` comments). A key may be listed with several tenants. Keys are
compared in constant time and never logged; ``repr`` shows only counts.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from memstack.view.errors import AuthError

log = logging.getLogger(__name__)

KEYS_ENV = "MEMSTACK_API_KEYS"
KEYS_FILE_ENV = "MEMSTACK_API_KEYS_FILE"
MIN_KEY_LENGTH = 8


@dataclass(frozen=True)
class ApiKeys:
    """Which tenants each key may read."""

    grants: tuple[tuple[str, frozenset[str]], ...]

    def __repr__(self) -> str:
        return f"ApiKeys({len(self.grants)} keys)"

    @classmethod
    def parse(cls, pairs: Iterable[str], origin: str) -> ApiKeys:
        grants: dict[str, set[str]] = {}
        for number, raw in enumerate(pairs, start=1):
            item = raw.split("#", 1)[0].strip()
            if not item:
                continue
            key, sep, tenant = item.rpartition(":")
            if not sep or not key.strip() or not tenant.strip():
                raise AuthError(f"{origin} entry {number} is not 'key:tenant'")
            if len(key.strip()) < MIN_KEY_LENGTH:
                raise AuthError(f"{origin} entry {number}: keys need at least "
                                f"{MIN_KEY_LENGTH} characters")
            grants.setdefault(key.strip(), set()).add(tenant.strip())
        return cls(tuple((k, frozenset(t)) for k, t in sorted(grants.items())))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiKeys:
        """Keys from ``MEMSTACK_API_KEYS`` and/or the file named by ``MEMSTACK_API_KEYS_FILE``."""
        env = os.environ if env is None else env
        found: list[ApiKeys] = []
        if env.get(KEYS_ENV):
            found.append(cls.parse(env[KEYS_ENV].split(","), KEYS_ENV))
        if env.get(KEYS_FILE_ENV):
            path = Path(env[KEYS_FILE_ENV])
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise AuthError(f"{KEYS_FILE_ENV}={path} cannot be read: {exc}") from exc
            found.append(cls.parse(lines, str(path)))
        merged: dict[str, frozenset[str]] = {}
        for keys in found:
            for key, tenants in keys.grants:
                merged[key] = merged.get(key, frozenset()) | tenants
        if not merged:
            raise AuthError(f"no API keys configured: set {KEYS_ENV}=\"key:tenant,...\" or "
                            f"{KEYS_FILE_ENV}=/path/to/keys (one key:tenant per line)")
        log.info("API keys: %d keys for %d tenants", len(merged),
                 len(set().union(*merged.values())))
        return cls(tuple(sorted(merged.items())))

    def tenants_of(self, key: str) -> frozenset[str] | None:
        """The tenants ``key`` may read, or None for an unknown key (constant-time compare)."""
        found: frozenset[str] | None = None
        for known, tenants in self.grants:
            if hmac.compare_digest(known.encode(), key.encode()):
                found = tenants
        return found
