"""The lineage index finds what a walk over the whole log finds, for every scope (pure logic)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from memstack.operators.forget import Subject, scope_covers
from memstack.operators.log import LogPosition
from memstack.pipelines.forgetting.lineage import LineageIndex, LogEntry, StaticLineage
from memstack.schemas.events import ForgetScope

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _entry(i: int, rng: random.Random) -> LogEntry:
    is_fact = rng.random() < 0.3
    subject = Subject(f"e{i}", rng.choice(["acme", "globex"]),
                      rng.choice([None, "s1", "s2", "s3"]),
                      rng.choice([None, "alice", "bob"]), is_fact,
                      rng.choice(["likes", "lives_in"]) if is_fact else None,
                      rng.choice([None, "tea", "paris"]) if is_fact else None)
    return LogEntry(subject, LogPosition(T0 + timedelta(seconds=i), i % 3, i), "plain")


def _scopes() -> list[ForgetScope]:
    return ([ForgetScope(type="tenant")]
            + [ForgetScope(type="session", session=s) for s in ("s1", "s2", "s9")]
            + [ForgetScope(type="subject", subject=s) for s in ("alice", "bob", "carol")]
            + [ForgetScope(type="fact", subject="alice", relation=r, object=o)
               for r in ("likes", "lives_in") for o in (None, "tea")])


def test_every_scope_finds_what_a_walk_over_the_log_finds() -> None:
    rng = random.Random(7)
    entries = [_entry(i, rng) for i in range(600)]
    lineage = StaticLineage.of_entries(entries)
    for tenant in ("acme", "globex", "initech"):
        for scope in _scopes():
            walked = [e for e in entries if scope_covers(scope, tenant, e.subject)]
            found = [e for e in lineage.scoped(tenant, scope)
                     if scope_covers(scope, tenant, e.subject)]
            assert found == walked, (tenant, scope)  # same entries, in log order
        assert lineage.entries(tenant) == [e for e in entries if e.subject.tenant == tenant]


def test_an_event_is_found_by_its_id_in_its_own_tenant_only() -> None:
    rng = random.Random(3)
    entries = [_entry(i, rng) for i in range(50)]
    index = LineageIndex()
    for e in entries:
        index.add(e)
    e7 = entries[7]
    other = "globex" if e7.subject.tenant == "acme" else "acme"
    assert index.of_events(e7.subject.tenant, ["e7", "missing"]) == {"e7": e7}
    assert index.of_events(other, ["e7"]) == {}
    from_uuid = ForgetScope(type="event", event_id="0190a0b0-0000-7000-8000-000000000000")
    assert index.scoped(e7.subject.tenant, from_uuid) == []
    assert len(index) == 50


def test_a_lookup_reads_only_its_scope() -> None:
    """What a subject lookup hands back does not grow with the rest of the log."""
    index = LineageIndex()
    for i in range(5_020):
        subject = "alice" if i % 251 == 0 else f"u{i}"
        index.add(LogEntry(Subject(f"e{i}", "acme", f"s{i % 7}", subject),
                           LogPosition(T0, 0, i), "plain"))
    alice = index.scoped("acme", ForgetScope(type="subject", subject="alice"))
    assert [e.position.offset for e in alice] == list(range(0, 5_020, 251))
