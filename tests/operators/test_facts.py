"""The bitemporal fact operator, scenario by scenario (events in, store content out)."""

from __future__ import annotations

from memstack.operators.mutations import DeleteFactVersion, PutFactEntry, PutFactVersion
from memstack.operators.relations import RelationRegistry
from tests.operators.givens import Scenario, as_of, build, fact, retraction, year


def test_supersession_closes_the_old_version_and_recuts_it_in_valid_time() -> None:
    paris = fact("alice", "lives_in", "Paris", tt=1, valid_from=year(2020))
    s = Scenario().given(paris)

    berlin = fact("alice", "lives_in", "Berlin", tt=2, valid_from=year(2022))

    s.when(berlin)

    assert s.value("alice", "lives_in", vt=year(2021), tt=2) == {"Paris"}
    assert s.value("alice", "lives_in", vt=year(2023), tt=2) == {"Berlin"}
    assert s.value("alice", "lives_in", vt=year(2023), tt=1) == {"Paris"}  # as then known
    versions = s.store.facts("alice", "lives_in")
    assert len(versions) == 3
    recut = [v for v in versions if v.object == "Paris" and v.tt_to is None]
    assert [(r.vt_from, r.vt_to, r.source_event_id) for r in recut] == [
        (year(2020), year(2022), paris.event.event_id)
    ]
    closed = [v for v in versions if v.tt_to is not None]
    assert [(c.object, c.vt_to, c.closed_by_event_id) for c in closed] == [
        ("Paris", None, berlin.event.event_id)
    ]


def test_a_late_fact_with_an_earlier_valid_time_stops_at_the_next_known_start() -> None:
    s = Scenario().given(fact("alice", "lives_in", "Paris", tt=1, valid_from=year(2020)))

    s.when(fact("alice", "lives_in", "London", tt=2, valid_from=year(2018)))

    assert s.value("alice", "lives_in", vt=year(2019), tt=2) == {"London"}
    assert s.value("alice", "lives_in", vt=year(2021), tt=2) == {"Paris"}
    assert s.value("alice", "lives_in", vt=year(2019), tt=1) == set()  # not yet known at tt=1
    # Paris's version was not touched: the late fact only added a row.
    assert [type(m) for m in s.last] == [PutFactEntry, PutFactVersion]


def test_retraction_ends_validity_and_keeps_history() -> None:
    s = Scenario().given(fact("alice", "lives_in", "Paris", tt=1, valid_from=year(2020)))

    s.when(retraction("alice", "lives_in", tt=2, valid_from=year(2023)))

    assert s.value("alice", "lives_in", vt=year(2024), tt=2) == set()
    assert s.value("alice", "lives_in", vt=year(2021), tt=2) == {"Paris"}
    assert s.value("alice", "lives_in", vt=year(2024), tt=1) == {"Paris"}  # history kept


def test_retraction_of_another_value_of_a_single_valued_relation_changes_nothing() -> None:
    s = Scenario().given(fact("alice", "lives_in", "Paris", tt=1, valid_from=year(2020)))

    s.when(retraction("alice", "lives_in", "Rome", tt=2, valid_from=year(2021)))
    assert s.value("alice", "lives_in", vt=year(2022), tt=2) == {"Paris"}
    assert [type(m) for m in s.last] == [PutFactEntry]

    s.when(retraction("alice", "lives_in", "Paris", tt=3, valid_from=year(2021)))
    assert s.value("alice", "lives_in", vt=year(2022), tt=3) == set()
    assert s.value("alice", "lives_in", vt=year(2020), tt=3) == {"Paris"}


def test_same_valid_time_conflict_is_won_by_the_later_transaction_time() -> None:
    a = fact("bob", "works_at", "Acme", tt=1, valid_from=year(2021), partition=0)
    b = fact("bob", "works_at", "Globex", tt=2, valid_from=year(2021), partition=1)

    in_order, reversed_delivery = build([a, b]), build([b, a])

    for store in (in_order, reversed_delivery):
        assert as_of(store.facts("bob", "works_at"), year(2022), 2) == {"Globex"}
        assert as_of(store.facts("bob", "works_at"), year(2022), 1) == {"Acme"}
    assert in_order.versions == reversed_delivery.versions


def test_multi_valued_relation_values_coexist_and_retract_individually_or_all() -> None:
    s = Scenario(RelationRegistry(frozenset({"likes"}))).given(
        fact("carol", "likes", "tea", tt=1, valid_from=year(2020)),
        fact("carol", "likes", "coffee", tt=2, valid_from=year(2021)),
    )
    assert s.value("carol", "likes", vt=year(2022), tt=2) == {"tea", "coffee"}

    s.when(retraction("carol", "likes", "tea", tt=3, valid_from=year(2023)))
    assert s.value("carol", "likes", vt=year(2024), tt=3) == {"coffee"}
    assert s.value("carol", "likes", vt=year(2022), tt=3) == {"tea", "coffee"}

    s.when(retraction("carol", "likes", tt=4, valid_from=year(2025)))
    assert s.value("carol", "likes", vt=year(2026), tt=4) == set()
    assert s.value("carol", "likes", vt=year(2024), tt=4) == {"coffee"}


def test_single_valued_by_default_a_second_value_supersedes() -> None:
    s = Scenario(RelationRegistry(frozenset())).given(
        fact("carol", "likes", "tea", tt=1, valid_from=year(2020)),
        fact("carol", "likes", "coffee", tt=2, valid_from=year(2021)),
    )
    assert s.value("carol", "likes", vt=year(2022), tt=2) == {"coffee"}


def test_out_of_order_delivery_across_partitions_gives_the_in_order_result() -> None:
    events = [
        fact("dave", "lives_in", "Oslo", tt=1, valid_from=year(2019), partition=0),
        fact("dave", "lives_in", "Rome", tt=2, valid_from=year(2021), partition=1),
        fact("dave", "lives_in", "Lima", tt=3, valid_from=year(2020), partition=0),
        retraction("dave", "lives_in", tt=4, valid_from=year(2022), partition=1),
    ]
    in_order = build(events)
    s = Scenario().given(events[0], events[2], events[3])  # partition 1's event 2 comes late

    s.when(events[1])

    assert s.store.versions == in_order.versions
    assert any(isinstance(m, DeleteFactVersion) for m in s.last)
    assert s.value("dave", "lives_in", vt=year(2021), tt=4) == {"Rome"}
    assert s.value("dave", "lives_in", vt=year(2020), tt=4) == {"Lima"}
    assert s.value("dave", "lives_in", vt=year(2023), tt=4) == set()


def test_explicit_valid_to_bounds_the_fact_and_splits_an_open_one() -> None:
    s = Scenario().given(fact("erin", "lives_in", "Paris", tt=1, valid_from=year(2015)))

    s.when(fact("erin", "lives_in", "Tokyo", tt=2, valid_from=year(2018), valid_to=year(2019)))

    assert s.value("erin", "lives_in", vt=year(2017), tt=2) == {"Paris"}
    assert s.value("erin", "lives_in", vt=year(2018), tt=2) == {"Tokyo"}
    assert s.value("erin", "lives_in", vt=year(2019), tt=2) == {"Paris"}
    current = sorted((v.vt_from, v.object) for v in s.store.facts("erin", "lives_in")
                     if v.tt_to is None)
    assert current == [(year(2015), "Paris"), (year(2018), "Tokyo"), (year(2019), "Paris")]


def test_forget_of_one_entry_equals_never_having_seen_it() -> None:
    paris = fact("alice", "lives_in", "Paris", tt=1, valid_from=year(2020))
    london = fact("alice", "lives_in", "London", tt=2, valid_from=year(2018))
    berlin = fact("alice", "lives_in", "Berlin", tt=3, valid_from=year(2022))
    s = Scenario().given(paris, london, berlin)

    s.when_forgotten(paris)

    assert s.store.versions == build([london, berlin]).versions
    assert s.store.entries == build([london, berlin]).entries
    gone = paris.event.event_id
    assert all(gone not in (v.source_event_id, v.closed_by_event_id)
               for v in s.store.versions.values())
    assert s.value("alice", "lives_in", vt=year(2021), tt=3) == {"London"}


def test_a_duplicate_delivery_changes_nothing() -> None:
    paris = fact("alice", "lives_in", "Paris", tt=1, valid_from=year(2020))
    s = Scenario().given(paris)

    s.when(paris)

    assert s.last == []


def test_the_common_case_is_incremental() -> None:
    s = Scenario().given(*(fact("f", "at", f"p{i}", tt=i, valid_from=year(2000 + i))
                           for i in range(1, 30)))

    s.when(fact("f", "at", "last", tt=40, valid_from=year(2040)))

    # One entry, one closed version re-put, one re-cut piece and one new version: no more.
    assert [type(m) for m in s.last] == [PutFactEntry] + [PutFactVersion] * 3
