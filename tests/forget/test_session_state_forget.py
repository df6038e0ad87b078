"""The shared forget contract (tests/forget/contract.py) on the session state, and its edges.

Every store under test in one test shares one ``CachingEncoder`` over the real MiniLM, so a
store and its clean build embed each text to the same vector, bit for bit: the fingerprints
compare the algebra (exact removal) and not MiniLM's batch-to-batch float noise (≤ 1e-6 per
vector, measured; the live test in tests/integration/test_live_state_forget.py has it).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from memstack.pipelines.embedding import CachingEncoder, MiniLMEncoder
from memstack.pipelines.forgetting.contract import AuditProbe
from memstack.pipelines.forgetting.session_state_store import StoreItems, divergence
from memstack.pipelines.session_state.table import item_of
from tests.forget.contract import ForgetContract, Make, _forget
from tests.forget.givens import event_request, memory, request
from tests.forget.reference import resolve_events
from tests.forget.state_under_test import SessionStateUnderTest


@pytest.fixture
def encoder(minilm: MiniLMEncoder) -> CachingEncoder:
    return CachingEncoder(minilm)


class TestSessionStateForgets(ForgetContract):
    @pytest.fixture
    def make(self, tmp_path: Path, encoder: CachingEncoder) -> Make:
        counter = itertools.count()
        return lambda: SessionStateUnderTest(tmp_path / f"s{next(counter)}", encoder)


def test_a_term_left_behind_is_a_residual(tmp_path: Path, encoder: CachingEncoder) -> None:
    """DuckDB erases a fact event but the state keeps its term: the audit sees it, although the
    rows are gone (the log's envelope still names the event's session)."""
    events = memory()
    sut = SessionStateUnderTest(tmp_path / "s", encoder)
    sut.load(events)
    targets = resolve_events(event_request(events[5]), events)  # ana likes sardines (s2)
    sut.duckdb.forget(targets)
    sut.lance.store.forget(targets)
    found = sut.state.residuals(AuditProbe.of(targets))
    assert [(r.check, r.count) for r in found] == [("terms", 1)]
    sut.state.forget(targets)  # too late: the rows are gone, the term cannot be rebuilt
    assert sut.state.residuals(AuditProbe.of(targets))


def test_forgetting_the_latest_item_moves_the_read_time_back(tmp_path: Path,
                                                            encoder: CachingEncoder) -> None:
    events = memory()
    sut, clean = (SessionStateUnderTest(tmp_path / n, encoder) for n in ("s", "c"))
    sut.load(events)
    probe = _forget(sut, events, event_request(events[2]))  # s1's last item (a fact)
    clean.load([e for e in events if e.event.event_id not in probe.event_ids])
    got, want = sut.states()["acme/s1"], clean.states()["acme/s1"]
    assert got.last_time == want.last_time == events[1].position.log_time.timestamp()
    assert divergence(got, want) <= 1e-12
    assert got.marks["f0"] == 101  # the request's mark: a second pass subtracts nothing


def test_a_later_event_keeps_a_forgotten_session_alive(tmp_path: Path,
                                                       encoder: CachingEncoder) -> None:
    """A session request drops the state only when all of its items go; a later event of the
    session (new data) is kept and the rest subtracted exactly."""
    events = memory()
    sut, clean = (SessionStateUnderTest(tmp_path / n, encoder) for n in ("s", "c"))
    sut.load(events)
    report = sut.store.forget(resolve_events(request({"type": "session", "session": "s2"},
                                                     tt=5), events))
    assert report.deleted == {"terms": 3, "sessions": 0}
    clean.load([e for i, e in enumerate(events) if i not in (3, 4, 5)])
    assert divergence(sut.states()["acme/s2"], clean.states()["acme/s2"]) <= 1e-12
    whole = sut.store.forget(resolve_events(request({"type": "session", "session": "s2"}),
                                            events))
    assert whole.deleted == {"terms": 2, "sessions": 1} and "acme/s2" not in sut.states()


def test_items_read_back_from_the_stores_are_the_ones_the_state_added(
        tmp_path: Path, encoder: CachingEncoder) -> None:
    """Turns come with their stored vector (no re-embedding); facts need the log's envelope
    to find their session (fact entries keep none)."""
    events = memory()
    sut = SessionStateUnderTest(tmp_path / "s", encoder)
    sut.load(events)
    want = {i.event_id: i for e in events if (i := item_of(e)) is not None}
    turns, _ = sut.state.items.of_events("acme", [events[0].event.event_id])
    assert turns == [want[events[0].event.event_id]] and turns[0].vector is not None
    assert (turns[0].vector == encoder.encode([turns[0].texts.key_text])[0]).all()
    facts = [e.event.event_id for e in events if e.event.kind == "fact_asserted"]
    placed, unplaced = sut.state.items.of_events("acme", facts)
    assert unplaced == 0 and placed and all(i == want[i.event_id] for i in placed)
    without_log = StoreItems(lambda: sut.duckdb.index, None)
    assert without_log.of_events("acme", facts) == ([], len(placed))


def test_divergence_is_infinite_when_counts_differ(tmp_path: Path,
                                                    encoder: CachingEncoder) -> None:
    events = memory()
    a, b = (SessionStateUnderTest(tmp_path / n, encoder) for n in ("a", "b"))
    a.load(events)
    b.load(events[:1])
    assert math.isinf(divergence(a.states()["acme/s1"], b.states()["acme/s1"]))
    assert divergence(a.states()["acme/s1"], a.states()["acme/s1"]) == 0.0


def test_requests_forgotten_together_equal_the_same_requests_one_by_one(
        tmp_path: Path, encoder: CachingEncoder) -> None:
    """A group hidden together (``ForgetProcessor.hide_all``): the state forgets every request
    before the stores erase any. s1's latest item goes first, then the one before it: the
    second request's read time must fall back past the first's item, which the stores still
    hold while the state forgets (read as kept, it would put the read time back on it)."""
    events = memory()
    first, second = (resolve_events(event_request(events[i], tt), events)
                     for i, tt in ((2, 100), (1, 101)))
    sut, together = (SessionStateUnderTest(tmp_path / n, encoder) for n in ("s", "t"))
    for state in (sut, together):
        state.load(events)
    for targets in (first, second):  # one by one: each erased before the next is forgotten
        sut.store.forget(targets)
    reports = together.state.forget_all([first, second])
    for targets in (first, second):
        together.duckdb.forget(targets)
        together.lance.store.forget(targets)
    got, want = together.states()["acme/s1"], sut.states()["acme/s1"]
    assert got.last_time == want.last_time == events[0].position.log_time.timestamp()
    assert divergence(got, want) <= 1e-12
    assert [r.deleted for r in reports] == [{"terms": 1, "sessions": 0}] * 2
    for targets in (first, second):
        assert together.state.residuals(AuditProbe.of(targets)) == []
