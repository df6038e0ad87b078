"""Fact state: seeding from stored entries, snapshot/restore, duplicates, edge rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memstack.operators.facts import FactOperator, KeyState, apply_fact, fact_entry
from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import FactEntry, PutFactEntry
from memstack.operators.relations import RelationRegistry
from memstack.operators.timeline import FactKey
from tests.operators.givens import Scenario, at, build, fact, position, retraction, year

KEY = FactKey("t1", "alice", "lives_in")
EVENTS = [
    fact("alice", "lives_in", "Paris", tt=1, valid_from=year(2020)),
    fact("alice", "lives_in", "London", tt=2, valid_from=year(2018)),
    fact("alice", "lives_in", "Berlin", tt=3, valid_from=year(2022)),
]


def test_the_pure_step_returns_a_new_state_and_leaves_the_old_one() -> None:
    empty = KeyState(KEY, multi=False)
    state, mutations = apply_fact(empty, EVENTS[0])
    assert empty.entries == () and empty.versions == ()
    assert len(state.entries) == 1 and len(state.current) == 1
    assert isinstance(mutations[0], PutFactEntry)


def test_a_key_seeded_from_stored_entries_continues_like_the_original() -> None:
    stored = [fact_entry(e) for e in EVENTS[:2]]
    seeded = MemoryOperator(loader=lambda key: stored if key == KEY else [])
    original = MemoryOperator()
    original.apply_batch(EVENTS[:2])

    more = fact("alice", "lives_in", "Rome", tt=4, valid_from=year(2021))
    assert seeded.apply(more) == original.apply(more)
    assert seeded.facts.state_of(KEY).entries == original.facts.state_of(KEY).entries
    assert set(seeded.facts.state_of(KEY).versions) == set(original.facts.state_of(KEY).versions)


def test_snapshot_and_restore_resume_exactly() -> None:
    op = MemoryOperator()
    op.apply_batch(EVENTS[:2])
    snapshot = op.snapshot()
    first = op.apply(EVENTS[2])

    resumed = MemoryOperator()
    resumed.restore(snapshot)

    assert resumed.apply(EVENTS[2]) == first
    assert len(snapshot.entries()) == 2


def test_a_duplicate_logged_at_an_earlier_position_wins_and_is_recomputed() -> None:
    paris, berlin = EVENTS[0], EVENTS[2]
    retry = replace(paris, position=position(5))  # the same event written again by a retry
    op = FactOperator()
    op.apply(berlin)
    op.apply(retry)
    op.apply(paris)  # the original copy, earlier in the log, arrives last

    assert [e.tt for e in op.state_of(KEY).entries] == [position(1), position(3)]
    reference = FactOperator()
    reference.apply_entries([fact_entry(paris), fact_entry(berlin)])
    assert set(op.state_of(KEY).versions) == set(reference.state_of(KEY).versions)


def test_an_entry_with_an_empty_valid_interval_changes_no_version() -> None:
    # No valid_from: validity starts at occurred_at (= the log time), after its valid_to.
    s = Scenario().given(fact("alice", "lives_in", "Paris", tt=1, valid_from=year(2020)))
    s.when(fact("alice", "lives_in", "Oslo", tt=2, valid_to=year(2021)))
    assert [type(m) for m in s.last] == [PutFactEntry]
    assert s.value("alice", "lives_in", vt=at(3), tt=2) == {"Paris"}


def test_a_retract_all_bounds_later_facts_of_any_value_of_a_multi_valued_relation() -> None:
    # tt=1: "Carol likes nothing from 2024"; tt=2: late "Carol likes tea from 2022".
    s = Scenario(RelationRegistry(frozenset({"likes"}))).given(
        retraction("carol", "likes", tt=1, valid_from=year(2024)),
        fact("carol", "likes", "tea", tt=2, valid_from=year(2022)),
    )
    assert s.value("carol", "likes", vt=year(2023), tt=2) == {"tea"}
    assert s.value("carol", "likes", vt=year(2025), tt=2) == set()


def test_tenants_and_subjects_never_share_a_timeline() -> None:
    store = build([
        fact("alice", "lives_in", "Paris", tt=1, valid_from=year(2020), tenant="t1"),
        fact("alice", "lives_in", "Rome", tt=2, valid_from=year(2021), tenant="t2"),
        fact("bob", "lives_in", "Oslo", tt=3, valid_from=year(2021), tenant="t1"),
    ])
    assert {v.object for v in store.facts("alice", "lives_in", tenant="t1")} == {"Paris"}
    assert len(store.versions) == 3 and all(v.tt_to is None for v in store.versions.values())


def test_entries_of_another_key_are_refused() -> None:
    other = fact_entry(fact("bob", "lives_in", "Oslo", tt=1))
    with pytest.raises(ValueError, match="belongs to"):
        KeyState(KEY, multi=False).add([other])


def test_an_assert_without_object_is_refused() -> None:
    entry = fact_entry(EVENTS[0])
    with pytest.raises(ValueError, match="must name its object"):
        replace(entry, object=None)
    assert isinstance(entry, FactEntry)
