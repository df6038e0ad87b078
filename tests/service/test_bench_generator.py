"""The service benchmark's event generator: valid events, facts every 8th, distinct ids."""

from __future__ import annotations

from memstack.jobs.bench.service.load import TENANT, bench_event
from memstack.schemas.events import EventKind, validate_event


def test_bench_events_are_valid_and_mixed() -> None:
    events = [validate_event(bench_event(i, f"text {i}")) for i in range(32)]
    assert {e.tenant for e in events} == {TENANT}
    assert [e.kind for e in events].count(EventKind.FACT_ASSERTED) == 4
    assert len({e.event_id for e in events}) == 32
    assert all(e.text() == f"text {i}" for i, e in enumerate(events)
               if e.kind is EventKind.MESSAGE)


def test_bench_texts_are_distinct_and_short() -> None:
    from memstack.jobs.bench.service.load import texts

    sample = texts(500)
    assert len(set(sample)) == 500
    assert all(10 <= len(t.split()) <= 25 for t in sample)


def test_the_open_loop_ratio_pairs_each_loaded_burst_with_its_rounds_alone_burst() -> None:
    import pytest

    from memstack.jobs.bench.service import paired_ratio

    got = paired_ratio([200.0, 250.0, 100.0], [180.0, 200.0, 95.0])
    assert (got.median, got.low, got.high) == pytest.approx((0.9, 0.8, 0.95))
    # pairing, not the faster alone burst: a slow round does not pull the others down
    assert paired_ratio([100.0, 300.0], [90.0, 270.0]).median == pytest.approx(0.9)
    with pytest.raises(ValueError, match="pair each"):
        paired_ratio([1.0], [])
