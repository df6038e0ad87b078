"""API keys of the HTTP service: stored hashed, compared in constant time, each granting
tenants and roles.

A key grants one or more tenants and a set of roles: ``read`` (queries, the change feed,
forget status), ``write`` (``POST .../events``) and ``forget`` (``POST .../forget``).

Where keys come from (merged):

- the keys file, ``$MEMSTACK_HOME/api-keys`` or ``MEMSTACK_API_KEYS_FILE``: one key per line,
  ``sha256:<hex digest> <tenant>[,<tenant>...] <role>[,<role>...]`` (``#`` comments). Lines are
  written by ``memstack keys add``, which prints the new key once and stores only its hash;
- for development, ``MEMSTACK_API_KEYS="key:tenant[:role+role],..."`` in clear (all roles when
  none are named), hashed as soon as it is read. A clear ``key:tenant[:roles]`` line in the
  keys file is read the same way.

Only SHA-256 digests are kept in memory; a presented key is hashed and compared with every
digest using :func:`hmac.compare_digest`. Keys are never logged; ``repr`` shows counts.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from memstack.view.errors import AuthError

log = logging.getLogger(__name__)

KEYS_ENV = "MEMSTACK_API_KEYS"
KEYS_FILE_ENV = "MEMSTACK_API_KEYS_FILE"
KEYS_FILE_NAME = "api-keys"
MIN_KEY_LENGTH = 8
ROLES = ("read", "write", "forget")
HASHED = "sha256:"


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True)
class Grant:
    """What one key may do: its hash, tenants and roles."""

    digest: bytes
    tenants: frozenset[str]
    roles: frozenset[str]

    def __repr__(self) -> str:
        return f"Grant(tenants={sorted(self.tenants)}, roles={sorted(self.roles)})"


def _roles(text: str, origin: str, sep: str) -> frozenset[str]:
    roles = frozenset(r.strip() for r in text.split(sep) if r.strip())
    unknown = sorted(roles - set(ROLES))
    if unknown or not roles:
        raise AuthError(f"{origin}: unknown role(s) {unknown or [text]}; roles are {ROLES}")
    return roles


def _clear(item: str, origin: str) -> Grant:
    """``key:tenant`` or ``key:tenant:role+role``."""
    parts = item.split(":")
    roles = frozenset(ROLES)
    if len(parts) >= 3 and all(r in ROLES for r in parts[-1].split("+")):
        roles = _roles(parts.pop(), origin, "+")
    key, tenant = ":".join(parts[:-1]).strip(), parts[-1].strip() if len(parts) > 1 else ""
    if not key or not tenant:
        raise AuthError(f"{origin} is not 'key:tenant' or 'key:tenant:role+role'")
    if len(key) < MIN_KEY_LENGTH:
        raise AuthError(f"{origin}: keys need at least {MIN_KEY_LENGTH} characters")
    return Grant(digest(key), frozenset([tenant]), roles)


def _hashed(item: str, origin: str) -> Grant:
    """``sha256:<hex> tenants roles``."""
    fields = item.split()
    if len(fields) != 3:
        raise AuthError(f"{origin} is not 'sha256:<hex> <tenant,...> <role,...>'")
    try:
        raw = bytes.fromhex(fields[0].removeprefix(HASHED))
    except ValueError as exc:
        raise AuthError(f"{origin}: the digest is not hexadecimal") from exc
    if len(raw) != hashlib.sha256().digest_size:
        raise AuthError(f"{origin}: the digest is not a SHA-256 digest")
    tenants = frozenset(t.strip() for t in fields[1].split(",") if t.strip())
    return Grant(raw, tenants, _roles(fields[2], origin, ","))


@dataclass(frozen=True)
class ApiKeys:
    """Every configured key, hashed."""

    grants: tuple[Grant, ...]

    def __repr__(self) -> str:
        return f"ApiKeys({len(self.grants)} keys)"

    @classmethod
    def parse(cls, lines: Iterable[str], origin: str) -> ApiKeys:
        grants: list[Grant] = []
        for number, raw in enumerate(lines, start=1):
            item = raw.split("#", 1)[0].strip()
            if not item:
                continue
            where = f"{origin} entry {number}"
            grants.append(_hashed(item, where) if item.startswith(HASHED)
                          else _clear(item, where))
        return cls(tuple(grants)).merged()

    def merged(self) -> ApiKeys:
        """One grant per digest (tenants and roles of its entries together)."""
        by_digest: dict[bytes, Grant] = {}
        for g in self.grants:
            old = by_digest.get(g.digest)
            by_digest[g.digest] = g if old is None else Grant(
                g.digest, old.tenants | g.tenants, old.roles | g.roles)
        return ApiKeys(tuple(by_digest[d] for d in sorted(by_digest)))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiKeys:
        """Keys from ``MEMSTACK_API_KEYS``, ``MEMSTACK_API_KEYS_FILE`` and the keys file."""
        env = os.environ if env is None else env
        found: list[Grant] = []
        if env.get(KEYS_ENV):
            found += cls.parse(env[KEYS_ENV].split(","), KEYS_ENV).grants
        path = keys_file(env)
        if path.exists() or env.get(KEYS_FILE_ENV):
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise AuthError(f"keys file {path} cannot be read: {exc}") from exc
            found += cls.parse(lines, str(path)).grants
        keys = cls(tuple(found)).merged()
        if not keys.grants:
            raise AuthError(f"no API keys configured: create one with `memstack keys add "
                            f"--tenant T`, or set {KEYS_ENV}=\"key:tenant,...\" for development")
        log.info("API keys: %d keys for %d tenants", len(keys.grants),
                 len(set().union(*(g.tenants for g in keys.grants))))
        return keys

    def grant_of(self, key: str) -> Grant | None:
        """The grant of ``key``, or None for an unknown key (constant-time compare)."""
        presented = digest(key)
        found: Grant | None = None
        for grant in self.grants:
            if hmac.compare_digest(grant.digest, presented):
                found = grant
        return found

    def tenants_of(self, key: str) -> frozenset[str] | None:
        grant = self.grant_of(key)
        return None if grant is None else grant.tenants


class LiveApiKeys(ApiKeys):
    """The running service's keys: the environment's, and the keys file's, re-read when the
    file changes (its mtime, size or inode; looked at on a request, at most every
    ``check_every_s``). Adding, revoking (``memstack keys revoke``) or rotating a key takes
    effect within a second, without a restart. A file that no longer parses keeps the last
    good keys and logs why at ERROR (once per change of the file); a removed file grants
    nothing."""

    def __init__(self, env: Mapping[str, str] | None = None, check_every_s: float = 0.25) -> None:
        env = dict(os.environ if env is None else env)
        ApiKeys.from_env(env)  # fail at start when no keys are configured, as the service did
        self._fixed = ApiKeys.parse(env[KEYS_ENV].split(","), KEYS_ENV).grants if env.get(
            KEYS_ENV) else ()
        self._path = keys_file(env)
        self._check_every_s = check_every_s
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._checked = 0.0
        self._current = ApiKeys(self._fixed).merged().grants
        self._refresh(force=True, announce=False)

    @property  # the frozen field of ApiKeys, read live here
    def grants(self) -> tuple[Grant, ...]:
        self._refresh()
        return self._current

    def _refresh(self, *, force: bool = False, announce: bool = True) -> None:
        now = time.monotonic()
        if not force and now - self._checked < self._check_every_s:
            return
        with self._lock:
            if not force and now - self._checked < self._check_every_s:
                return
            self._checked = now
            try:
                st = self._path.stat()
                seen: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
            except OSError:
                seen = None
            if seen == self._seen and not force:
                return
            self._seen = seen
            self._current = self._load(seen is not None, announce)

    def _load(self, exists: bool, announce: bool) -> tuple[Grant, ...]:
        found = list(self._fixed)
        if exists:
            try:
                lines = self._path.read_text(encoding="utf-8").splitlines()
                found += ApiKeys.parse(lines, str(self._path)).grants
            except (OSError, UnicodeDecodeError, AuthError) as exc:
                log.error("keys file %s not reloaded, the previous keys stay: %s",
                          self._path, exc)
                return self._current
        keys = ApiKeys(tuple(found)).merged().grants
        if announce:
            log.info("API keys reloaded from %s: %d keys", self._path, len(keys))
        return keys


def keys_file(env: Mapping[str, str] | None = None) -> Path:
    """``MEMSTACK_API_KEYS_FILE``, else ``$MEMSTACK_HOME/api-keys``."""
    env = os.environ if env is None else env
    if env.get(KEYS_FILE_ENV):
        return Path(env[KEYS_FILE_ENV]).expanduser()
    return Path(env.get("MEMSTACK_HOME", ".memstack")).expanduser() / KEYS_FILE_NAME


def add_key(path: Path, tenants: Iterable[str], roles: Iterable[str],
            label: str = "") -> str:
    """Create a random key granting ``tenants`` and ``roles``; store its hash in ``path``
    (created with mode 0600) and return the key (shown once, never stored)."""
    tenant_list = sorted({t.strip() for t in tenants if t.strip()})
    role_set = _roles(",".join(roles), "roles", ",")
    if not tenant_list or any("," in t or " " in t for t in tenant_list):
        raise AuthError("name one or more tenants (no commas or spaces in a tenant)")
    key = "msk_" + secrets.token_urlsafe(32)
    line = (f"{HASHED}{digest(key).hex()} {','.join(tenant_list)} "
            f"{','.join(r for r in ROLES if r in role_set)}")
    if label:
        line += f"  # {label.replace(chr(10), ' ')}"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as out:
        out.write(line + "\n")
    return key


def revoke_key(path: Path, prefix: str) -> int:
    """Remove the keys file's lines whose digest starts with ``prefix`` (hex, as ``memstack
    keys list`` shows it, at least 8 digits); the file is replaced atomically, so a running
    service sees the change. Returns how many lines went."""
    wanted = prefix.strip().removeprefix(HASHED).rstrip("…").lower()
    if len(wanted) < 8 or any(c not in "0123456789abcdef" for c in wanted):
        raise AuthError(f"{prefix!r} is not the start of a key's digest (8 or more hex digits, "
                        "as `memstack keys list` shows them)")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines
            if not line.strip().lower().startswith(HASHED + wanted)]
    gone = len(lines) - len(kept)
    if gone:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.writelines(kept)
        os.replace(tmp, path)
    return gone
