"""As-of semantics through the Python API, against the hand-worked scenario of ``givens``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from memstack.pipelines.stores.bundle import Stores
from memstack.schemas import asof as rule
from memstack.view import InvalidAsOfError, InvalidQueryError, LogCut, MemoryView
from memstack.view.asof import known_of
from memstack.view.fusion import BM25_WEIGHT, RRF_K, VECTOR_WEIGHT
from tests.view.givens import K, V


def value(view: MemoryView, valid: datetime, known: object, subject: str = "ana") -> list[str]:
    return [f.object for f in view.as_of(valid, known).facts(subject, "lives_in")]  # type: ignore[arg-type]


@pytest.mark.parametrize(("valid", "known", "expected"), [
    (V(2, 15), K(2, 20), ["Porto"]),    # as known before the correction arrived
    (V(2, 15), K(3, 20), ["Braga"]),    # after the correction
    (V(1, 20), K(3, 20), ["Lisbon"]),   # before the late fact was known
    (V(1, 20), K(4, 20), ["Faro"]),     # once the late fact is known
    (V(1, 10), K(4, 20), ["Lisbon"]),   # valid before the late fact's validity
    (V(2, 15), K(4, 20), ["Braga"]),    # the late fact's portion ends where Braga starts
    (V(1, 1), K(1, 10), ["Lisbon"]),    # both bounds inclusive at the start
    (datetime(2023, 12, 31, tzinfo=V(1, 1).tzinfo), K(4, 20), []),  # before any validity
    (V(2, 15), K(1, 9), []),            # before anything was known
])
def test_facts_as_of_time(acme: MemoryView, valid: datetime, known: datetime,
                          expected: list[str]) -> None:
    assert value(acme, valid, known) == expected


@pytest.mark.parametrize(("valid", "cut", "expected"), [
    (V(2, 15), {0: 3}, ["Porto"]),       # offsets 0..2 of partition 0: no correction yet
    (V(2, 15), {0: 5}, ["Braga"]),
    (V(1, 20), {0: 6}, ["Lisbon"]),      # the late fact is offset 6: not inside
    (V(1, 20), {0: 7}, ["Faro"]),
    (V(1, 20), {0: 0}, []),
    (V(1, 20), {}, []),
])
def test_facts_as_of_log_position(acme: MemoryView, valid: datetime, cut: dict[int, int],
                                  expected: list[str]) -> None:
    assert value(acme, valid, cut) == expected
    assert value(acme, valid, LogCut.of(cut)) == expected
    text = ",".join(f"{p}:{o}" for p, o in cut.items())
    if text:
        assert value(acme, valid, text) == expected


def test_a_cut_applies_per_fact_key(acme: MemoryView) -> None:
    # Partition 1 (bob) not consumed at all: ana's facts are still exact.
    assert value(acme, V(1, 20), {0: 8}) == ["Faro"]
    assert value(acme, V(1, 20), {0: 8}, subject="bob") == []
    assert [f.object for f in acme.as_of(V(3, 1), {0: 8, 1: 1}).facts("bob")] == ["Acme"]


def test_facts_default_to_now_and_list_every_current_subject(acme: MemoryView) -> None:
    now = acme.facts()
    assert {(f.subject, f.object) for f in now} == {("ana", "Braga"), ("bob", "Acme")}
    assert all(f.tenant == "acme" for f in now)


def test_history_is_the_hand_worked_timeline(acme: MemoryView) -> None:
    rows = acme.history("ana", "lives_in")
    got = {(f.object, f.vt_from, f.vt_to, f.tt_from_offset, f.tt_to_offset) for f in rows}
    assert got == {
        ("Lisbon", V(1, 1), None, 0, 2),
        ("Lisbon", V(1, 1), V(2, 1), 2, 6),
        ("Porto", V(2, 1), None, 2, 4),
        ("Braga", V(2, 1), None, 4, None),
        ("Lisbon", V(1, 1), V(1, 15), 6, None),
        ("Faro", V(1, 15), V(2, 1), 6, None),
    }


@pytest.mark.parametrize("known", [K(3, 20), {0: 5}])
def test_history_as_known_hides_later_versions_and_closes(acme: MemoryView,
                                                          known: object) -> None:
    rows = acme.as_of(known=known).history("ana", "lives_in")  # type: ignore[arg-type]
    got = {(f.object, f.vt_to, f.tt_from_offset, f.tt_to_offset) for f in rows}
    assert got == {
        ("Lisbon", None, 0, 2),
        ("Lisbon", V(2, 1), 2, None),   # closed at offset 6, which was not known yet
        ("Porto", None, 2, 4),
        ("Braga", None, 4, None),
    }


def test_records_in_log_order_as_of(acme: MemoryView) -> None:
    texts = [r.text for r in acme.as_of(V(12, 31), K(2, 20)).records("s1")]
    assert texts == ["Ana lives in Lisbon, in a flat near the river", "Ana moved to Porto"]
    everything = acme.records("s1")
    assert len(everything) == 4 and all(r.kind == "note" for r in everything)
    assert [r.offset for r in everything] == [1, 3, 5, 7]
    window = acme.records("s1", start=V(1, 10), end=V(2, 1))
    assert [r.text for r in window] == ["Ana had lived in Faro since mid-January"]
    valid_early = acme.as_of(V(1, 10)).records("s1")
    assert [r.offset for r in valid_early] == [1]          # the others are valid only later
    assert [r.offset for r in acme.as_of(known={0: 4}).records()] == [1, 3]


@pytest.mark.parametrize("known", [K(1, 9), K(2, 20), K(3, 20), K(12, 31), {0: 4}, {0: 7}])
@pytest.mark.parametrize("valid", [V(1, 1), V(1, 10), V(2, 15), V(12, 31)])
def test_records_read_in_duckdb_are_the_rules_over_every_record(
        acme: MemoryView, stores: Stores, valid: datetime, known: object) -> None:
    """The records read puts the rule, the times and the limit into one DuckDB query; the
    oracle is the rule's Python form over every stored record of the tenant."""
    view = acme.as_of(valid, known)  # type: ignore[arg-type]
    matches = rule.matcher(view.as_of.valid, known_of(view.as_of), rule.RECORDS)

    def answers(r: Any) -> bool:
        return matches({"vt_from": r.vt_from, "vt_to": r.vt_to, "tt": r.tt,
                        "partition": r.partition, "offset": r.offset})

    every = stores.events.records("acme")
    expected = [r.event_id for r in every if answers(r)]
    assert [r.event_id for r in view.records()] == expected
    assert [r.event_id for r in view.records(limit=1)] == expected[:1]
    inside = [r.event_id for r in every if answers(r) and V(1, 10) <= r.occurred_at < V(2, 1)]
    assert [r.event_id for r in view.records(start=V(1, 10), end=V(2, 1))] == inside


def test_search_applies_as_of_before_ranking(acme: MemoryView) -> None:
    # As known on Feb 20 only the Lisbon and Porto notes existed; with k=1 a post-filter would
    # return nothing when the later correction ranks first.
    early = acme.as_of(V(2, 15), K(2, 20))
    hits = early.search("correction Braga not Porto", 1, kinds=["note"])
    assert [h.memory.text for h in hits] == ["Ana moved to Porto"]
    later = acme.as_of(V(2, 15), K(3, 20)).search("correction Braga not Porto", 1)
    assert later[0].memory.text == "Correction: Ana moved to Braga, not Porto"
    visible = {h.memory.event_id for h in early.search("Ana", 10)}
    expected = {r.event_id for r in early.records()}
    assert visible == expected and len(expected) == 3   # two notes and Bob's message


def test_search_hits_carry_provenance_and_score_parts(acme: MemoryView) -> None:
    hits = acme.search("Where does Ana live now?", 3, session="s1")
    assert [h.rank for h in hits] == [1, 2, 3]
    fused = [h.score.fused for h in hits]
    assert fused == sorted(fused, reverse=True)
    for hit in hits:
        parts = hit.score
        assert hit.memory.session == "s1" and hit.memory.tenant == "acme"
        assert parts.vector_rank is not None and parts.vector_distance is not None
        expected = sum(w / (RRF_K + r) for w, r in ((BM25_WEIGHT, parts.bm25_rank),
                                                    (VECTOR_WEIGHT, parts.vector_rank)) if r)
        assert parts.fused == pytest.approx(expected + parts.neighbours)
    bm25 = acme.search("Faro", 5, mode="bm25")
    assert bm25[0].memory.text == "Ana had lived in Faro since mid-January"
    assert bm25[0].score.vector_rank is None and bm25[0].score.bm25_score
    assert all(h.score.bm25_rank is None for h in acme.search("Faro", 5, mode="vector"))


def test_search_scopes(acme: MemoryView) -> None:
    assert {h.memory.kind for h in acme.search("Acme", 10, kinds=["message"])} == {"message"}
    assert {h.memory.subject for h in acme.search("Acme", 10, subject="bob")} == {"bob"}
    assert acme.search("Acme", 10, session="nope") == []
    with pytest.raises(InvalidQueryError):
        acme.search("Acme", 10, kinds=["fact_asserted"])
    with pytest.raises(InvalidQueryError):
        acme.search("   ", 10)


def test_tenants_are_separate(stores: object, acme: MemoryView) -> None:
    other = MemoryView("other", acme.stores, encoder=acme.encoder)
    assert value(other, V(2, 15), K(4, 20)) == ["Tokyo"]
    assert {h.memory.tenant for h in other.search("Ana lives in", 10)} == {"other"}
    assert "Tokyo" not in {f.object for f in acme.facts()}
    assert all(h.memory.tenant == "acme" for h in acme.search("Tokyo", 10))


def test_bad_coordinates_say_what_to_do(acme: MemoryView) -> None:
    with pytest.raises(InvalidAsOfError, match="RFC 3339"):
        acme.as_of("yesterday")
    with pytest.raises(InvalidAsOfError, match="naive"):
        acme.as_of(datetime(2024, 1, 1))  # noqa: DTZ001  # the case under test
    assert acme.as_of(known="0:3,1:2").as_of.known == LogCut.of({0: 3, 1: 2})
