"""``ForgetLedger``: every forget request of ``<prefix>.forget``, indexed for O(1) ``covers``.

Every projector, live or replay, loads the ledger first and drops the events it covers, so a
replay of any copy of the log cannot resurrect forgotten content. A request covers the events
of its scope logged no later than itself (see :mod:`memstack.operators.forget`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from memstack.operators.forget import ForgetRequest, Subject, request_of
from memstack.operators.log import LoggedEvent
from memstack.pipelines.log_reader import LogRecord, read_bounded
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Envelope, parse_event

log = logging.getLogger(__name__)

_Key = tuple[str, ...]


class ForgetLedger:
    """The requests by scope key; ``covers`` is a handful of dict look-ups per event."""

    def __init__(self, requests: Iterable[ForgetRequest] = ()) -> None:
        self._requests: dict[str, ForgetRequest] = {}
        self._latest: dict[_Key, datetime] = {}
        self._facts: dict[tuple[str, str, str], list[ForgetRequest]] = defaultdict(list)
        for request in requests:
            self.add(request)

    @classmethod
    def load(cls, bootstrap: str, forget_topic: str) -> ForgetLedger:
        """Read the whole ledger (up to its end now)."""
        ledger = cls.from_records(read_bounded(bootstrap, forget_topic))
        log.info("forget ledger: %d request(s) from %s", len(ledger), forget_topic)
        return ledger

    @classmethod
    def from_records(cls, records: Iterable[LogRecord]) -> ForgetLedger:
        ledger = cls()
        for record in records:
            request = parse_request(record)
            if request is not None:
                ledger.add(request)
        return ledger

    def __len__(self) -> int:
        return len(self._requests)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._requests

    @property
    def requests(self) -> list[ForgetRequest]:
        """In log order."""
        return sorted(self._requests.values(), key=lambda r: (r.position, r.request_id))

    def get(self, request_id: str) -> ForgetRequest | None:
        return self._requests.get(request_id)

    def add(self, request: ForgetRequest) -> None:
        """Index one request (idempotent by request id)."""
        if request.request_id in self._requests:
            return
        self._requests[request.request_id] = request
        s = request.scope
        if s.type == "fact":
            self._facts[(request.tenant, s.subject or "", s.relation or "")].append(request)
            return
        value = {"tenant": "", "event": s.event_id, "session": s.session,
                 "subject": s.subject}[s.type] or ""
        key = (request.tenant, s.type, value)
        known = self._latest.get(key)
        if known is None or request.log_time > known:
            self._latest[key] = request.log_time

    def covers(self, event: Envelope, log_time: datetime | None = None) -> bool:
        """True when a request covers the event logged at ``log_time``.

        ``log_time`` None means "unknown": any request of the scope covers it (erring towards
        forgetting). Fact patterns need the payload: pass the opened :class:`Event`.
        """
        return self.covers_subject(Subject.of_event(event), log_time)

    def covers_logged(self, logged: LoggedEvent) -> bool:
        return self.covers(logged.event, logged.position.log_time)

    def covers_subject(self, item: Subject, log_time: datetime | None) -> bool:
        t = item.tenant
        keys = [(t, "tenant", ""), (t, "event", item.event_id)]
        if item.session is not None:
            keys.append((t, "session", item.session))
        if item.subject is not None:
            keys.append((t, "subject", item.subject))
        for key in keys:
            latest = self._latest.get(key)
            if latest is not None and (log_time is None or log_time <= latest):
                return True
        if item.is_fact:
            for request in self._facts.get((t, item.subject or "", item.relation or ""), ()):
                if request.covers(item, log_time):
                    return True
        return False


def parse_request(record: LogRecord) -> ForgetRequest | None:
    """The request of one ledger record; None (logged) for tombstones and invalid records."""
    if record.value is None:
        return None
    try:
        event = parse_event(record.value)
        return request_of(LoggedEvent(event, record.position))
    except (InvalidEventError, ValueError) as exc:
        log.warning("forget ledger: skipping record %d:%d (%s)", record.position.partition,
                    record.position.offset, exc)
        return None
