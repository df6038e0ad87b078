"""The realistic mix of the pipeline and replay benchmarks."""

from __future__ import annotations

from collections import Counter

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.jobs.bench.ingest import calls
from memstack.jobs.bench.workload import conversation, mix, texts_of
from memstack.schemas.events import EventKind


def test_mix_has_every_kind_and_a_few_forgets_of_earlier_sessions() -> None:
    events = mix(EventBuilder(Defaults("bench", "test")), 3, 1200, forget_every=50)
    assert len(events) == 1200
    kinds = Counter(e.kind for e in events)
    for kind in (EventKind.MESSAGE, EventKind.FACT_ASSERTED, EventKind.TOOL_CALL,
                 EventKind.TOOL_RESULT, EventKind.OBSERVATION, EventKind.NOTE):
        assert kinds[kind] > 0, kind
    assert kinds[EventKind.FORGET_REQUESTED] == 2  # after 50 and 100 conversations
    seen: set[str] = set()
    for e in events:
        if e.kind is EventKind.FORGET_REQUESTED:
            assert e.payload.scope.session in seen  # type: ignore[union-attr]  # a forget
        else:
            seen.add(e.session)


def test_mix_texts_are_all_distinct_and_facts_supersede() -> None:
    builder = EventBuilder(Defaults("bench", "test"))
    events = mix(builder, 0, 600) + mix(builder, 60, 400)  # next ranges: no shared text
    texts = texts_of(events)
    assert len(texts) == len(set(texts)) == len(events)  # every kind here has a text
    moves = Counter((e.subject, e.payload.relation) for e in events  # type: ignore[union-attr]
                    if e.kind is EventKind.FACT_ASSERTED)
    assert moves[("user:0", "lives_in")] == 2  # the person moves: the second supersedes


def test_conversation_is_ten_events_in_time_order() -> None:
    events = conversation(EventBuilder(Defaults("bench", "test")), 7)
    assert len(events) == 10
    assert [e.occurred_at for e in events] == sorted(e.occurred_at for e in events)
    assert {e.session for e in events} == {"s7"}


def test_ingest_calls_cycle_sessions_and_texts() -> None:
    got = calls(130)
    assert len(got) == 130 and got[0][0] == "s0" and got[64][0] == "s0"
    assert len({text for _, _, text in got}) == 4


def test_pipeline_phases_share_no_text_and_carry_forgets() -> None:
    from memstack.jobs.bench.pipeline import Workload

    work = Workload.build(1200, 600)
    assert (len(work.warm), len(work.burst), len(work.paced)) == (100, 1200, 600)
    phases = [set(texts_of(p)) for p in (work.warm, work.burst, work.paced)]
    assert not (phases[0] & phases[1]) and not (phases[1] & phases[2])
    assert not (phases[0] & phases[2])
    assert sum(e.kind is EventKind.FORGET_REQUESTED for e in work.burst) == 2
