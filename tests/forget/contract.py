"""The shared contract of :class:`Forgettable` stores: one suite, every implementation.

A store's test module subclasses :class:`ForgetContract` and provides the ``make`` fixture: a
callable returning a fresh :class:`StoreUnderTest` (the store, plus how to load events into it
through its own write path, what its queries show, and a content fingerprint). See
docs/forget.md, "Adding a store". Targets come from the pure resolution
(:func:`tests.forget.reference.resolve_events`), so the suite needs no other store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from memstack.operators.forget import ForgetRequest
from memstack.operators.log import LoggedEvent
from memstack.pipelines.forgetting.contract import AuditProbe, Forgettable
from tests.forget.givens import event_request, memory, request
from tests.forget.reference import resolve_events


class StoreUnderTest(Protocol):
    @property
    def store(self) -> Forgettable: ...

    def load(self, events: Sequence[LoggedEvent]) -> None:
        """Write the events through the store's normal write path."""
        ...

    def visible_ids(self, tenant: str) -> set[str]:
        """Event ids any query of this store returns for the tenant (at any time)."""
        ...

    def fingerprint(self) -> str:
        """A content hash of everything the store holds (for clean-build comparisons)."""
        ...


Make = Callable[[], StoreUnderTest]


def _forget(sut: StoreUnderTest, events: list[LoggedEvent], req: ForgetRequest) -> AuditProbe:
    targets = resolve_events(req, events)
    sut.store.forget(targets)
    return AuditProbe.of(targets)


def _clean(make: Make, events: list[LoggedEvent], req: ForgetRequest) -> str:
    ids = resolve_events(req, events).event_ids
    clean = make()
    clean.load([e for e in events if e.event.event_id not in ids])
    return clean.fingerprint()


class ForgetContract:
    """Every test loads :func:`memory`, forgets a scope and checks the store."""

    def scopes(self, events: list[LoggedEvent]) -> list[ForgetRequest]:
        return [event_request(events[1]), event_request(events[2]),
                request({"type": "session", "session": "s2"}),
                request({"type": "subject", "subject": "user:ana"}),
                request({"type": "fact", "subject": "user:ana", "relation": "lives_in",
                         "object": "Lisbon"}),
                request({"type": "tenant"})]

    def test_residuals_see_what_was_not_forgotten_yet(self, make: Make) -> None:
        events, sut = memory(), make()
        sut.load(events)
        probe = AuditProbe.of(resolve_events(event_request(events[1]), events))
        assert sum(r.count for r in sut.store.residuals(probe)) > 0

    def test_forgotten_content_is_gone_and_the_rest_equals_a_clean_build(self,
                                                                         make: Make) -> None:
        events = memory()
        for req in self.scopes(events):
            sut = make()
            sut.load(events)
            probe = _forget(sut, events, req)
            assert sut.store.residuals(probe) == [], (req.describe(), sut.store.residuals(probe))
            assert not (sut.visible_ids(req.tenant) & probe.event_ids), req.describe()
            assert sut.fingerprint() == _clean(make, events, req), req.describe()

    def test_other_tenants_are_untouched(self, make: Make) -> None:
        events, sut = memory(), make()
        sut.load(events)
        before = sut.visible_ids("other")
        _forget(sut, events, request({"type": "tenant"}))
        assert sut.visible_ids("other") == before and before

    def test_forgetting_twice_changes_nothing_more(self, make: Make) -> None:
        events, sut = memory(), make()
        sut.load(events)
        req = request({"type": "session", "session": "s1"})
        _forget(sut, events, req)
        once = sut.fingerprint()
        report = sut.store.forget(resolve_events(req, events))
        assert sum(report.deleted.values()) == 0
        assert sut.fingerprint() == once

    def test_later_events_of_a_forgotten_scope_are_new_data(self, make: Make) -> None:
        events, sut = memory(), make()
        req = request({"type": "session", "session": "s2"}, tt=5)
        sut.load(events)
        later = {e.event.event_id for e in events[6:8]} & sut.visible_ids("acme")
        probe = _forget(sut, events, req)
        assert later and later <= sut.visible_ids("acme")
        assert not (probe.event_ids & sut.visible_ids("acme"))
