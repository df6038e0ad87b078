"""LoCoMo evidence recall and the event mapping it scores through, worked by hand."""

from __future__ import annotations

from datetime import UTC, datetime

from memstack.jobs.eval.locomo import all_found, events_of, recall
from memstack.jobs.eval.locomo_data import Conversation, Observation, Question, Turn

AT = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_recall_is_the_share_of_evidence_turns_in_the_top_k() -> None:
    questions = [Question("q1", "?", ("D1:1", "D1:2"), 1), Question("q2", "?", ("D1:3",), 2)]
    got = {("q1", "hybrid"): [("D1:9",), ("D1:2",), ("D1:1",)],
           ("q2", "hybrid"): [("D1:4",), ("D1:5",), ("D1:3", "D1:6")]}
    assert recall(questions, got, "hybrid", 2) == (0.5 + 0.0) / 2
    assert recall(questions, got, "hybrid", 3) == (1.0 + 1.0) / 2
    assert recall([], got, "hybrid", 3) != recall([], got, "hybrid", 3)  # NaN when empty


def test_the_context_rate_counts_questions_with_every_evidence_turn_inside() -> None:
    questions = [Question("q1", "?", ("D1:1", "D1:2"), 1), Question("q2", "?", ("D1:3",), 2)]
    got = {("q1", "context"): [("D1:2",), ("D1:9",)],           # one of two: not whole
           ("q2", "context"): [("D1:8",), ("D1:3", "D1:4")]}
    assert all_found(questions, got, "context") == 0.5
    got[("q1", "context")].append(("D1:1",))
    assert all_found(questions, got, "context") == 1.0


def test_events_cite_their_turns_and_notes_cite_their_evidence() -> None:
    conv = Conversation("conv-1", ("Caroline", "Melanie"),
                        (Turn("D1:1", "Caroline", "Hi Mel!", AT),
                         Turn("D1:2", "Melanie", "Hey Caroline!", AT)),
                        (Observation("Caroline", "Caroline greets Mel.", ("D1:1",), AT),),
                        (Question("q", "Who greets?", ("D1:1",), 1),))
    events, cites = events_of([conv])
    assert [e.kind for e in events] == ["message", "message", "note"]
    assert [e.payload.role for e in events[:2]] == ["user", "assistant"]  # type: ignore[union-attr]
    assert [cites[e.event_id] for e in events] == [("D1:1",), ("D1:2",), ("D1:1",)]
    assert {e.session for e in events} == {"conv-1"}
