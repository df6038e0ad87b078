"""Data keys for crypto-shredding: one key per (tenant, session, subject) scope.

Why that scope: a forget request names an event, a session, a subject, a tenant or a fact
pattern. Keys per (tenant, session, subject-or-none) let a session forget destroy the keys of
that session, a subject forget the keys of that subject in every session and a tenant forget
all of the tenant's keys, without touching anyone else's data. Event and fact-pattern forgets
are narrower than a key; the forget ledger filters those (see docs/forget.md).

``FileKeyStore`` keeps each key in its own file; destroying overwrites and unlinks it. A key
can also be **retired**: it stays readable (``get``) but no longer seals (``current`` makes a
fresh one). A forget request retires its scope's keys before it is emitted and the forget
processor destroys them when it applies the request, so a request that never reaches the log
destroys nothing (the stores and the log stay in step). A real KMS plugs in behind the same
:class:`KeyStore` protocol.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from memstack.foundation.errors import MemstackError
from memstack.schemas.events import ForgetScope
from memstack.schemas.ids import uuid7


class KeyStoreError(MemstackError):
    """The key store cannot be read or written; check MEMSTACK_HOME's keys/ folder."""


@dataclass(frozen=True)
class KeyScope:
    tenant: str
    session: str
    subject: str | None = None

    def matches(self, tenant: str, session: str | None, subject: str | None) -> bool:
        """True when this scope falls under a forget of (tenant[, session][, subject])."""
        return (self.tenant == tenant and (session is None or self.session == session)
                and (subject is None or self.subject == subject))


class KeyStore(Protocol):
    def current(self, scope: KeyScope) -> tuple[str, bytes]:
        """The live key of a scope (created on first use): ``(key_id, 32 key bytes)``."""
        ...

    def get(self, key_id: str) -> bytes | None:
        """The key, or None once destroyed (or never known)."""
        ...

    def destroy(self, tenant: str, session: str | None = None,
                subject: str | None = None) -> list[str]:
        """Destroy every key under the scope (live or retired); return their ids."""
        ...

    def retire(self, tenant: str, session: str | None = None,
               subject: str | None = None) -> list[str]:
        """Stop sealing with the scope's live keys (they stay readable); return their ids."""
        ...

    def key_ids(self, tenant: str | None = None) -> list[str]: ...


POINTERS = "scopes"
"""The folder (per tenant) of scope pointers: each names its scope's newest live key."""

RETIRED = ".retired"
"""The suffix of a retired key's file (renamed from ``.key``: readable, never sealing)."""


class FileKeyStore:
    """Keys as files under ``root/<tenant-hash>/<key-hash>.key`` (JSON: id, scope, key); a
    retired key's file ends in ``.retired`` instead."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._live: dict[KeyScope, tuple[str, bytes]] = {}
        self._live_files: dict[str, str] = {}
        """key id -> its live file's path, as text (``current`` checks it on every call)."""
        self._opened: dict[str, bytes] = {}
        """key id -> key, of keys ``get`` read (it checks that the live or the retired file
        still exists on every call)."""

    def current(self, scope: KeyScope) -> tuple[str, bytes]:
        with self._lock:
            cached = self._live.get(scope)
            # The file is checked on every call, not cached: another process (`memstack
            # forget`, the service's forget route) may have retired the key meanwhile.
            if cached is not None and os.path.exists(self._live_file(cached[0], scope.tenant)):
                return cached
            found = self._pointed(scope)
            if found is None:
                found = self._create(scope)
            self._live[scope] = found
            return found

    def get(self, key_id: str) -> bytes | None:
        # A key read before is answered from memory while its file (live or retired) exists:
        # one stat per sealed record instead of reading and decoding the file. A destroyed
        # key's files are gone, so it is never answered from here.
        opened = self._opened.get(key_id)
        if opened is not None:
            live = self._live_file(key_id, key_id.split("/", 1)[0])
            if os.path.exists(live) or os.path.exists(live.removesuffix(".key") + RETIRED):
                return opened
        key = self._read(key_id)
        if key is not None:
            if len(self._opened) > 100_000:  # bounded: many scopes over a long run
                self._opened.clear()
            self._opened[key_id] = key
        return key

    def _read(self, key_id: str) -> bytes | None:
        tenant = key_id.split("/", 1)[0]
        path = self._path(key_id, tenant)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            path = path.with_suffix(RETIRED)
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise KeyStoreError(f"unreadable key file {path}: {exc}") from exc
        except OSError as exc:
            raise KeyStoreError(f"unreadable key file {path}: {exc}") from exc
        if not raw.strip(b"\0"):
            return None  # being shredded right now (zeros, then unlinked): destroyed
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise KeyStoreError(f"unreadable key file {path}: {exc}") from exc
        return base64.b64decode(data["key"])

    def destroy(self, tenant: str, session: str | None = None,
                subject: str | None = None) -> list[str]:
        destroyed = []
        with self._lock:
            for key_id, scope, _ in list(self._scan(tenant, retired=True)):
                if scope.matches(tenant, session, subject):
                    path = self._path(key_id, tenant)
                    _shred(path)
                    _shred(path.with_suffix(RETIRED))
                    _shred(self._pointer(scope))  # it names the key, and so the scope
                    destroyed.append(key_id)
            self._live = {s: v for s, v in self._live.items() if v[0] not in destroyed}
        return destroyed

    def retire(self, tenant: str, session: str | None = None,
               subject: str | None = None) -> list[str]:
        retired = []
        with self._lock:
            for key_id, scope, _ in list(self._scan(tenant)):
                if scope.matches(tenant, session, subject):
                    path = self._path(key_id, tenant)
                    try:
                        os.replace(path, path.with_suffix(RETIRED))  # atomic: seals no more
                    except FileNotFoundError:
                        continue  # destroyed meanwhile
                    retired.append(key_id)
            self._live = {s: v for s, v in self._live.items() if v[0] not in retired}
        return retired

    def key_ids(self, tenant: str | None = None) -> list[str]:
        tenants = [tenant] if tenant else [p.name for p in self.root.iterdir() if p.is_dir()]
        ids: list[str] = []
        for t in tenants:
            ids += [k for k, _, _ in self._scan(t, hashed=tenant is None, retired=True)]
        return sorted(ids)

    def _create(self, scope: KeyScope) -> tuple[str, bytes]:
        key_id = f"{scope.tenant}/{scope.session}/{scope.subject or '-'}#{uuid7().hex[:16]}"
        key = os.urandom(32)
        path = self._path(key_id, scope.tenant)
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"key_id": key_id, "tenant": scope.tenant, "session": scope.session,
                "subject": scope.subject, "key": base64.b64encode(key).decode()}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, path)
        pointer = self._pointer(scope)
        pointer.parent.mkdir(exist_ok=True)
        tmp = pointer.with_suffix(".tmp")
        tmp.write_text(key_id)
        os.replace(tmp, pointer)  # after the key: a pointer never names a missing key
        return key_id, key

    def _pointed(self, scope: KeyScope) -> tuple[str, bytes] | None:
        """The live key the scope's pointer names, None when there is none (no pointer yet,
        or its key was retired or destroyed): one small read, never a scan of the tenant's
        keys, so that sealing for a new session costs the same with 10 or 100,000 keys.

        Two processes that both find no pointer each create a key and the last pointer
        wins; the other key stays live and readable, and ``retire`` and ``destroy`` find
        every key of a scope by scanning, so a scope with two live keys is still forgotten
        whole. Key folders made before pointers existed are read the same way: their scopes
        get one fresh key each on first use."""
        try:
            key_id = self._pointer(scope).read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise KeyStoreError(f"unreadable key pointer {self._pointer(scope)}: {exc}") from exc
        try:
            loaded = _load(self._path(key_id, scope.tenant))
        except OSError as exc:
            raise KeyStoreError(f"unreadable key file for {key_id}: {exc}") from exc
        if loaded is None or loaded[1] != scope:
            return None  # retired, destroyed, being shredded right now (or a hash collision)
        return key_id, loaded[2]

    def _pointer(self, scope: KeyScope) -> Path:
        """The file naming ``scope``'s newest live key id (``<tenant>/scopes/<scope hash>``)."""
        name = json.dumps([scope.tenant, scope.session, scope.subject])
        return self.root / _h(scope.tenant) / POINTERS / _h(name)

    def _scan(self, tenant: str, *, hashed: bool = False,
              retired: bool = False) -> Iterator[tuple[str, KeyScope, bytes]]:
        """The tenant's live keys (and its retired ones too with ``retired``)."""
        folder = self.root / (tenant if hashed else _h(tenant))
        if not folder.is_dir():
            return
        paths = [*folder.glob("*.key"), *(folder.glob(f"*{RETIRED}") if retired else [])]
        for path in sorted(paths):
            loaded = _load(path)
            if loaded is not None:  # else destroyed or being written right now
                yield loaded

    def _path(self, key_id: str, tenant: str) -> Path:
        return self.root / _h(tenant) / f"{_h(key_id)}.key"

    def _live_file(self, key_id: str, tenant: str) -> str:
        path = self._live_files.get(key_id)
        if path is None:
            if len(self._live_files) > 100_000:  # bounded: many scopes over a long run
                self._live_files.clear()
            path = self._live_files[key_id] = str(self._path(key_id, tenant))
        return path


def scope_args(scope: ForgetScope) -> tuple[str | None, str | None]:
    """``(session, subject)`` of ``KeyStore.destroy`` for a key scope."""
    return (scope.session if scope.type == "session" else None,
            scope.subject if scope.type == "subject" else None)


def rotate_before_request(keys: KeyStore, tenant: str, scope: ForgetScope) -> list[str]:
    """Retire the scope's keys now, before the request is emitted (key scopes only).

    Events of the scope sealed afterwards get a fresh key, so new data is never sealed with a
    key the request is about to destroy. The retired keys stay readable until the forget
    processor applies the request and destroys them (see
    :mod:`memstack.pipelines.forgetting.keys`): a request that never reaches the log (the
    broker away, the emitter killed) then destroys nothing, and the log and the stores agree.
    """
    if scope.type not in ("session", "subject", "tenant"):
        return []
    session, subject = scope_args(scope)
    return keys.retire(tenant, session=session, subject=subject)


def _load(path: Path) -> tuple[str, KeyScope, bytes] | None:
    """``(key id, scope, key)`` of a key file, None when it is gone or not whole (being
    written, or zeroed by a shred)."""
    try:
        d = json.loads(path.read_bytes())
    except (FileNotFoundError, ValueError):
        return None
    scope = KeyScope(d["tenant"], d["session"], d["subject"])
    return d["key_id"], scope, base64.b64decode(d["key"])


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _shred(path: Path) -> None:
    """Overwrite a key file with zeros, flush it to disk, then unlink it."""
    try:
        size = path.stat().st_size
        with path.open("r+b") as fh:
            fh.write(b"\0" * size)
            fh.flush()
            os.fsync(fh.fileno())
        path.unlink()
    except FileNotFoundError:
        return
