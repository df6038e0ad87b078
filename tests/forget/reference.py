"""The reference resolution of a forget request, for tests: over a known list of logged events,
with no store. The forget contract suites resolve their requests with it, so they need no store
besides the one under test."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from memstack.operators.facts import FactOperator, fact_entry
from memstack.operators.forget import ForgetRequest, Tombstones
from memstack.operators.log import LoggedEvent
from memstack.operators.mutations import FactEntry
from memstack.operators.relations import RelationRegistry
from memstack.operators.timeline import FactKey
from memstack.schemas.events import EventKind


def covered_ids(request: ForgetRequest, logged: Iterable[LoggedEvent]) -> frozenset[str]:
    """Ids of the logged events the request covers."""
    return frozenset(e.event.event_id for e in logged if request.covers_event(e))


def resolve_events(request: ForgetRequest, logged: Iterable[LoggedEvent],
                   registry: RelationRegistry | None = None) -> Tombstones:
    """Tombstones of a request over a known list of logged events (pure; no store).

    The fact mutations are what the facts operator emits when the covered entries are removed
    from the keys built from all of ``logged``: the diff to a build that never saw them.
    """
    events = list(logged)
    ids = covered_ids(request, events)
    registry = registry or RelationRegistry()
    entries: dict[FactKey, list[FactEntry]] = defaultdict(list)
    for e in events:
        if e.event.kind in (EventKind.FACT_ASSERTED, EventKind.FACT_RETRACTED):
            entry = fact_entry(e)
            entries[FactKey.of(entry)].append(entry)
    keys = frozenset(k for k, es in entries.items() if any(x.event_id in ids for x in es))
    mutations = FactOperator(registry, loader=lambda key: entries[key]).forget(ids, keys)
    texts = [t for e in events if e.event.event_id in ids and (t := e.event.text())]
    sessions = frozenset(e.event.session for e in events if e.event.event_id in ids)
    return Tombstones(request, ids, keys, tuple(mutations), tuple(dict.fromkeys(texts)),
                      sessions)
