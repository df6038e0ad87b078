"""The contract every :class:`EventIndex` satisfies (run by each backend's test module).

A backend module subclasses :class:`EventIndexContract` and provides the ``index`` fixture
(a fresh, writable index) and ``reopen(index)`` (the same store opened again).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from memstack.operators.log import LogPosition
from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import PutRecord
from memstack.operators.timeline import FactKey
from memstack.pipelines.stores.base import EventIndex
from memstack.pipelines.stores.errors import StoreWriteError
from tests.pipelines.helpers import TOPIC, at, builder, conversation, logged, mutations, year


class EventIndexContract:
    def reopen(self, index: EventIndex) -> EventIndex:
        raise NotImplementedError

    def test_a_fresh_index_is_empty(self, index: EventIndex) -> None:
        assert index.applied_offsets(TOPIC) == {}
        assert set(index.counts().values()) == {0}

    def test_records_round_trip_in_log_order(self, index: EventIndex) -> None:
        b = builder()
        events = conversation(b, "s1", 5) + conversation(b, "s2", 3, start=5)
        muts = mutations(events)
        index.apply(muts, {0: 8}, topic=TOPIC)
        rows = [m.row for m in muts if isinstance(m, PutRecord)]
        assert index.record(rows[2].event_id) == rows[2]
        assert index.records("acme", session="s1") == rows[:5]
        assert index.records("acme", since=at(2), until=at(6)) == rows[2:6]
        assert index.records("acme", limit=2) == rows[:2]
        assert index.records("other") == []

    def test_offsets_are_stored_with_the_rows_and_only_move_forward(
        self, index: EventIndex
    ) -> None:
        b = builder()
        index.apply(mutations(conversation(b, "s1", 3)), {0: 3, 1: 7}, topic=TOPIC)
        index.apply([], {0: 2, 2: 1}, topic=TOPIC)
        index.apply([], {0: 9}, topic="other.events")
        assert index.applied_offsets(TOPIC) == {0: 3, 1: 7, 2: 1}
        assert index.applied_offsets("other.events") == {0: 9}
        reopened = self.reopen(index)
        assert reopened.applied_offsets(TOPIC) == {0: 3, 1: 7, 2: 1}
        assert reopened.counts()["records"] == 3

    def test_applying_a_batch_twice_changes_nothing(self, index: EventIndex) -> None:
        b = builder()
        events = [
            *conversation(b, "s1", 4),
            logged(b.fact("s1", "ana", "lives_in", "Lisbon", valid_from=year(2020)), 4),
            logged(b.fact("s1", "ana", "lives_in", "Porto", valid_from=year(2022)), 5),
        ]
        muts = mutations(events)
        index.apply(muts, {0: 6}, topic=TOPIC)
        first = index.content_hashes()
        index.apply(muts, {0: 6}, topic=TOPIC)
        assert index.content_hashes() == first
        assert index.counts()["fact_versions"] == 3  # Lisbon open, then closed+cut, Porto

    def test_content_hash_tracks_content(self, index: EventIndex) -> None:
        muts = mutations(conversation(builder(), "s1", 2))
        index.apply(muts[:1], {0: 1}, topic=TOPIC)
        before = index.content_hash()
        index.apply(muts, {0: 1}, topic=TOPIC)
        assert index.content_hash() != before

    def test_a_failed_batch_commits_neither_rows_nor_offsets(self, index: EventIndex) -> None:
        b = builder()
        good = mutations(conversation(b, "s1", 2))
        index.apply(good, {0: 2}, topic=TOPIC)
        before = index.content_hashes()
        fresh = mutations(conversation(b, "s2", 2, start=2))
        first = fresh[0]
        assert isinstance(first, PutRecord)
        broken = PutRecord(replace(first.row, tenant=None))  # type: ignore[arg-type]  # on purpose
        with pytest.raises(StoreWriteError):
            index.apply([*fresh[1:], broken], {0: 4}, topic=TOPIC)
        assert index.content_hashes() == before
        assert index.applied_offsets(TOPIC) == {0: 2}

    def test_fact_entries_are_read_back_per_key(self, index: EventIndex) -> None:
        b = builder()
        events = [logged(b.fact("s", "ana", "lives_in", "Lisbon"), 0),
                  logged(b.fact("s", "ana", "likes", "jazz"), 1),
                  logged(b.retract("s", "ana", "lives_in"), 2)]
        index.apply(mutations(events), {0: 3}, topic=TOPIC)
        lives, none = FactKey("acme", "ana", "lives_in"), FactKey("acme", "bob", "lives_in")
        got = index.fact_entries([lives, none])
        assert got[none] == []
        assert [e.event_id for e in got[lives]] == [events[0].event.event_id,
                                                    events[2].event.event_id]
        assert [e.op for e in got[lives]] == ["assert", "retract"]
        assert got[lives][0].tt == events[0].position

    def test_facts_as_of_valid_and_transaction_time(self, index: EventIndex) -> None:
        b = builder()
        lisbon = logged(b.fact("s", "ana", "lives_in", "Lisbon", valid_from=year(2020)), 1)
        porto = logged(b.fact("s", "ana", "lives_in", "Porto", valid_from=year(2022)), 2)
        index.apply(mutations([lisbon, porto]), {0: 3}, topic=TOPIC)

        def objects(**kw: object) -> list[str]:
            return [v.object for v in index.facts_as_of("acme", subject="ana", **kw)]  # type: ignore[arg-type]  # kwargs for the test

        assert objects(valid=year(2021)) == ["Lisbon"]
        assert objects(valid=year(2023)) == ["Porto"]
        assert objects(valid=year(2023), known=at(1)) == ["Lisbon"]  # known then: Lisbon, open
        assert objects(valid=year(2023), known=LogPosition(at(2), 0, 1)) == ["Lisbon"]
        assert objects(valid=year(2023), known=LogPosition(at(2), 0, 2)) == ["Porto"]
        assert objects(valid=year(2023), known=at(0)) == []
        assert index.facts_as_of("other", valid=year(2023)) == []

    def test_facts_as_of_subjects_is_facts_as_of_of_each_subject(self, index: EventIndex) -> None:
        b = builder()
        events = [logged(b.fact("s", "ana", "lives_in", "Lisbon", valid_from=year(2020)), 0),
                  logged(b.fact("s", "ana", "lives_in", "Porto", valid_from=year(2022)), 1),
                  logged(b.fact("s", "ana", "likes", "jazz", valid_from=year(2020)), 2),
                  logged(b.fact("s", "bob", "lives_in", "Faro", valid_from=year(2021)), 3),
                  logged(b.fact("s", "cy", "lives_in", "Braga", valid_from=year(2020)), 4)]
        index.apply(mutations(events), {0: 5}, topic=TOPIC)
        for kw in ({"valid": year(2021)}, {"valid": year(2023)},
                   {"valid": year(2023), "known": at(1)}, {}):
            many = index.facts_as_of_subjects("acme", ["ana", "bob", "nobody"], **kw)  # type: ignore[arg-type]  # kwargs for the test
            each = [v for who in ("ana", "bob", "nobody")
                    for v in index.facts_as_of("acme", subject=who, **kw)]  # type: ignore[arg-type]  # kwargs for the test
            assert many == each
        assert index.facts_as_of_subjects("acme", []) == []
        assert index.facts_as_of_subjects("other", ["ana"]) == []

    def test_stored_versions_equal_the_operator_state_after_late_events(
        self, index: EventIndex
    ) -> None:
        b = builder()
        operator = MemoryOperator()
        batches = [
            [logged(b.fact("s", "ana", "lives_in", "Porto", valid_from=year(2022)), 5)],
            [logged(b.fact("s", "ana", "lives_in", "Lisbon", valid_from=year(2020)), 3, 1)],
            [logged(b.retract("s", "ana", "lives_in", valid_from=year(2024)), 9)],
        ]
        for i, batch in enumerate(batches):
            index.apply(mutations(batch, operator), {0: 10 + i}, topic=TOPIC)
        key = FactKey("acme", "ana", "lives_in")
        want = sorted(operator.facts.state_of(key).versions, key=lambda v: v.version_id)
        got = sorted(index.fact_history("acme", "ana", "lives_in"), key=lambda v: v.version_id)
        assert got == want
        assert index.facts_as_of("acme", subject="ana", valid=year(2025)) == []
        assert [v.object for v in index.facts_as_of("acme", subject="ana", valid=year(2021))] == [
            "Lisbon"]
