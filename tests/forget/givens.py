"""A small memory of two tenants (messages, notes, facts) and forget requests over it.

``tt=k`` puts an event at log time ``T0 + k s``, offset ``k`` of partition 0.
"""

from __future__ import annotations

from memstack.operators.forget import ForgetRequest
from memstack.operators.log import LoggedEvent, LogPosition
from memstack.schemas.events import ForgetScope
from memstack.schemas.ids import uuid7
from tests.pipelines.helpers import at, builder, logged, year


def memory() -> list[LoggedEvent]:
    """Distinct, searchable texts; facts with supersession (single) and a multi relation."""
    acme, other = builder("acme"), builder("other")
    events = [
        acme.message("s1", "user", "My locker combination is 31-07-44 at the Lisbon gym"),
        acme.note("s1", "Ana is allergic to penicillin and carries an epipen", subject="user:ana"),
        acme.fact("s1", "user:ana", "lives_in", "Lisbon", valid_from=year(2020)),
        acme.message("s2", "user", "We talked about the quarterly sailing regatta in Cascais"),
        acme.fact("s2", "user:ana", "lives_in", "Porto", valid_from=year(2022)),
        acme.fact("s2", "user:ana", "likes", "sardines"),
        acme.fact("s2", "user:bob", "lives_in", "Faro"),
        acme.note("s2", "Bob keeps bees on the roof of his Faro apartment", subject="user:bob"),
        other.message("s1", "user", "The other tenant's orchid collection is blooming"),
        acme.message("s3", "assistant", "Reminder: renew the passport before the trip to Japan"),
    ]
    return [logged(e, i) for i, e in enumerate(events)]


def request(scope: dict[str, str], tt: int = 100, tenant: str = "acme") -> ForgetRequest:
    return ForgetRequest(str(uuid7()), tenant, ForgetScope.model_validate(scope),
                         LogPosition(at(tt), 0, tt))


def event_request(event: LoggedEvent, tt: int = 100) -> ForgetRequest:
    return request({"type": "event", "event_id": event.event.event_id}, tt,
                   event.event.tenant)
