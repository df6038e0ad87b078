"""What the log says an event was: envelopes of ``<prefix>.events``, for resolution and audits.

Some lineage is only in the log: the stores keep no session for fact entries, so a session
forget finds that session's fact events here. Envelopes are in the clear even when payloads
are sealed; sealed payloads are opened when the key still exists (fact patterns need them).
An entry keeps the envelope only (who, where, when, how readable), never the payload's text:
the live worker keeps its lineage for its whole life, and forgotten text must not stay in it.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from memstack.foundation.keystore import KeyStore
from memstack.foundation.log_coordinates import next_offset
from memstack.foundation.sealing import Shredded, open_sealed
from memstack.operators.forget import ForgetRequest, Subject
from memstack.operators.log import LoggedEvent, LogPosition
from memstack.pipelines.log_reader import KeptReader, LogRecord
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event, ForgetScope
from memstack.schemas.sealed import SealedEvent, parse_record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogEntry:
    """One record of the events topic: what a scope predicate reads, and how readable it is."""

    subject: Subject
    position: LogPosition
    state: str
    """``plain`` (payload in the clear), ``sealed`` (key alive) or ``shredded`` (key gone)."""


class Lineage(Protocol):
    def scoped(self, tenant: str, scope: ForgetScope) -> list[LogEntry]:
        """The entries that ``scope`` in ``tenant`` may cover (a superset: the caller still
        checks each with the request's predicate), found through an index, never by a walk
        over the tenant's log unless the scope is the tenant."""
        ...

    def of_events(self, tenant: str, ids: Iterable[str]) -> dict[str, LogEntry]:
        """The entries of the events ``ids`` (those the log holds)."""
        ...


class LineageIndex:
    """Log entries by the keys a forget scope names: the cost of a lookup is the size of what
    it finds, not of the log (a subject forget over a million events reads that subject's
    entries only). Entries keep log order per key. Not thread-safe: its owners lock."""

    def __init__(self) -> None:
        self._tenant: dict[str, list[LogEntry]] = defaultdict(list)
        self._event: dict[tuple[str, str], LogEntry] = {}
        self._session: dict[tuple[str, str], list[LogEntry]] = defaultdict(list)
        self._subject: dict[tuple[str, str], list[LogEntry]] = defaultdict(list)

    def __len__(self) -> int:
        return len(self._event)

    def add(self, entry: LogEntry) -> None:
        s = entry.subject
        self._tenant[s.tenant].append(entry)
        self._event[(s.tenant, s.event_id)] = entry
        if s.session is not None:
            self._session[(s.tenant, s.session)].append(entry)
        if s.subject is not None:
            self._subject[(s.tenant, s.subject)].append(entry)

    def scoped(self, tenant: str, scope: ForgetScope) -> list[LogEntry]:
        if scope.type == "tenant":
            return list(self._tenant.get(tenant, ()))
        if scope.type == "event":
            found = self._event.get((tenant, scope.event_id or ""))
            return [] if found is None else [found]
        if scope.type == "session":
            return list(self._session.get((tenant, scope.session or ""), ()))
        return list(self._subject.get((tenant, scope.subject or ""), ()))  # subject, fact

    def of_events(self, tenant: str, ids: Iterable[str]) -> dict[str, LogEntry]:
        return {i: e for i in ids if (e := self._event.get((tenant, i))) is not None}

    def tenant(self, tenant: str) -> list[LogEntry]:
        return list(self._tenant.get(tenant, ()))


class StaticLineage:
    """Lineage from logged events already in memory (tests, evaluations)."""

    def __init__(self, events: Iterable[LoggedEvent]) -> None:
        self._index = LineageIndex()
        for e in events:
            self._index.add(LogEntry(Subject.of_event(e.event), e.position, "plain"))

    @classmethod
    def of_entries(cls, entries: Iterable[LogEntry]) -> StaticLineage:
        lineage = cls(())
        for entry in entries:
            lineage._index.add(entry)
        return lineage

    def entries(self, tenant: str) -> list[LogEntry]:
        """Every event of the tenant in the log, in log order per partition."""
        return self._index.tenant(tenant)

    def scoped(self, tenant: str, scope: ForgetScope) -> list[LogEntry]:
        return self._index.scoped(tenant, scope)

    def of_events(self, tenant: str, ids: Iterable[str]) -> dict[str, LogEntry]:
        return self._index.of_events(tenant, ids)


class KafkaLineage:
    """Lineage read from the events topic, incrementally: the first call reads the whole
    topic, each later one only what was appended since. Keep one for as long as the stores
    are forgotten in (the live worker keeps one for its life: a fresh one per batch of forget
    requests read the whole log each time). Safe to share between threads (the store thread
    resolves with it while the auditor rereads)."""

    def __init__(self, bootstrap: str, topic: str, keys: KeyStore | None = None) -> None:
        self.bootstrap, self.topic, self.keys = bootstrap, topic, keys
        self._next: dict[int, int] = {}
        self._index = LineageIndex()
        self._lock = threading.Lock()
        self._reader = KeptReader(bootstrap, topic)

    def refresh(self) -> int:
        """Read what was appended since the last call; returns the entries added."""
        with self._lock:
            return self._refresh()

    def close(self) -> None:
        """Close the kept consumer (a later call opens another)."""
        with self._lock:
            self._reader.close()

    def _refresh(self) -> int:
        stop = self._reader.end_offsets()
        n = 0
        for record in self._reader.read(self._next, stop):
            entry = self.entry_of(record)
            if entry is not None:
                self._index.add(entry)
                n += 1
        self._next = dict(stop)
        return n

    def entries(self, tenant: str) -> list[LogEntry]:
        """Every event of the tenant in the log, in log order per partition."""
        with self._lock:
            self._refresh()
            return self._index.tenant(tenant)

    def scoped(self, tenant: str, scope: ForgetScope) -> list[LogEntry]:
        with self._lock:
            self._refresh()
            return self._index.scoped(tenant, scope)

    def of_events(self, tenant: str, ids: Iterable[str]) -> dict[str, LogEntry]:
        with self._lock:
            self._refresh()
            return self._index.of_events(tenant, ids)

    def reread(self, request: ForgetRequest) -> list[LogEntry]:
        """The entries ``request`` covers, read afresh (payload readability as of now), for
        audits: only the offsets where the lineage found them are read again (per partition,
        from the first to the last), not the whole topic."""
        wanted: dict[int, set[int]] = defaultdict(set)
        for known in self.scoped(request.tenant, request.scope):
            if request.covers(known.subject, known.position.log_time):
                wanted[known.position.partition].add(known.position.offset)
        start = {p: min(offsets) for p, offsets in wanted.items()}
        stop = {p: next_offset(max(offsets)) for p, offsets in wanted.items()}
        out = []
        with self._lock:
            for record in self._reader.read(start, stop):
                if record.position.offset in wanted[record.position.partition]:
                    entry = self.entry_of(record)
                    if entry is not None:
                        out.append(entry)
        return out

    def entry_of(self, record: LogRecord) -> LogEntry | None:
        if record.value is None:
            return None
        try:
            parsed = parse_record(record.value)
            if isinstance(parsed, Event):
                return LogEntry(Subject.of_event(parsed), record.position, "plain")
            return self._sealed(parsed, record.position)
        except InvalidEventError as exc:
            log.debug("lineage: skipping invalid record at %s (%s)", record.position, exc)
            return None

    def _sealed(self, sealed: SealedEvent, position: LogPosition) -> LogEntry:
        opened = None if self.keys is None else open_sealed(sealed, self.keys)
        if opened is None or isinstance(opened, Shredded):
            return LogEntry(Subject.of_event(sealed), position, "shredded")
        return LogEntry(Subject.of_event(opened), position, "sealed")
