"""``eval openproblems``: its oracles (recall, windows, bands, the joint solve) and its generators
(what each turn writes, where each question is asked), at a small size; the Ray path (slow)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import torch

from memstack.jobs.eval.bm25 import BM25
from memstack.jobs.eval.locomo_data import Conversation, Question, Turn
from memstack.jobs.eval.openproblems import state as st
from memstack.jobs.eval.openproblems.data import Asked, Stream, recall_at
from memstack.jobs.eval.openproblems.weights import (
    WeightsPlan,
    decode,
    dense_with_notes,
    joint_weights,
    turn_items,
)
from memstack.operators.consolidation import RidgeLearner, WriteBatch
from memstack.operators.session_state import StateConfig
from memstack.view.context import CurrentFacts, RecentTurns, RelevantRecords, default_sources

T0 = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)


def unit_rows(n: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def stream(n: int = 6, notes: tuple[tuple[int, ...], ...] = ((1, 2),),
           asked: tuple[tuple[int, ...], ...] = ((1,),), seed: int = 0) -> Stream:
    """A synthetic conversation: turn i says ``turn i ...``, one turn a minute."""
    turns = tuple(Turn(f"D1:{i + 1}", "A", f"A: turn {i} " + "x" * 10, T0 + timedelta(minutes=i))
                  for i in range(n))
    vectors = unit_rows(n + len(asked) + len(notes), seed=seed)
    qs = [Asked(Question(f"q{j}", f"question {j}", tuple(turns[i].dia_id for i in ev), 1), ev,
                vectors[n + j]) for j, ev in enumerate(asked)]
    conv = Conversation("conv-x", ("A", "B"), turns, (), tuple(a.question for a in qs))
    return Stream(conv, tuple(t.text for t in turns), tuple(t.at.timestamp() for t in turns),
                  vectors[:n], tuple(qs), tuple(f"note {j}" for j in range(len(notes))), notes,
                  vectors[n + len(asked):])


# -- oracles -----------------------------------------------------------------------------------

def test_recall_at_counts_evidence_in_the_first_k() -> None:
    assert recall_at([3, 1, 7], [1, 9], 2) == 0.5
    assert recall_at([3, 1, 7], [1, 9], 1) == 0.0
    assert recall_at([9, 1], [1, 9], 10) == 1.0
    with pytest.raises(ValueError):
        recall_at([1], [], 10)


def test_bm25_ranks_the_rare_shared_term_first_and_matches_the_formula() -> None:
    docs = ["the cat sat", "the dog sat on the mat", "a zebra"]
    bm = BM25(docs)
    assert bm.rank("zebra", 1) == [2]
    assert bm.rank("the dog", 3)[0] == 1
    n, df, tf, length = 3, 1, 1, 2
    avg = (3 + 6 + 2) / 3
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    expected = idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length / avg))
    assert bm.scores("zebra")[2] == pytest.approx(expected)
    assert bm.scores("unknown words")[0] == 0.0


def test_window_keeps_the_latest_whole_turns_that_fit() -> None:
    texts = ["aaaa", "bb", "cccccc", "d"]  # bytes + 1 newline each: 5, 3, 7, 2
    assert st.window(texts, 4, 9, "bytes") == {2, 3}
    assert st.window(texts, 4, 8, "bytes") == {3}  # turn 2 does not fit whole
    assert st.window(texts, 2, 100, "bytes") == {0, 1}  # nothing after the end
    assert st.window(texts, 4, 0, "bytes") == set()
    assert st.window(texts, 4, 5, "tokens") == {2, 3}  # ceil(6/4)+1 + ceil(1/4)+1 = 5
    assert st.window(texts, 4, 4, "tokens") == {3}


def test_summary_bands_and_crossover() -> None:
    points = [st.Point(1, 0.5, 1.0, 1.0), st.Point(8, 0.4, 1.0, 0.5),
              st.Point(64, 0.5, 0.25, 0.0), st.Point(128, 0.3, 0.0, 0.0)]
    out = st.summary(points, "x_")
    assert out["x_state_recall_near"] == pytest.approx(0.45)
    assert out["x_window_recall_near"] == 1.0
    assert out["x_state_recall_far"] == pytest.approx(0.4)
    assert out["x_window_recall_far"] == pytest.approx(0.125)
    assert out["x_budget_window_recall_near"] == pytest.approx(0.75)
    assert out["x_crossover_turns"] == 64.0
    assert st.summary([st.Point(1, 0.0, 1.0, 1.0)])["crossover_turns"] == -1.0


def test_joint_solve_is_independent_of_the_learner_and_agrees_with_it() -> None:
    s = stream(n=40)
    plan = WeightsPlan(dim=256, context=1)
    items = [it for per in turn_items(s, plan) for it in per]
    centre = torch.zeros(384, dtype=torch.float64)
    learner = RidgeLearner(plan.learner(), centre)
    for it in items:  # one write per item, as a stream
        learner.write(it.item_id, torch.from_numpy(it.cue), torch.from_numpy(it.target),
                      log_time=it.log_time)
    joint = joint_weights(items, plan, centre)
    w = learner.weights().numpy()
    assert np.linalg.norm(w - joint) / np.linalg.norm(joint) < 1e-9
    other = joint_weights(items[:-1], plan, centre)  # the oracle sees a missing item
    assert np.linalg.norm(w - other) / np.linalg.norm(other) > 1e-6


def test_decode_ranks_by_cosine_and_centres_on_the_candidates() -> None:
    cands = np.array([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]], dtype=np.float32)
    assert decode(np.array([[1.0, 0.1]]), cands, 2, False) == [[0, 2]]
    centred = decode(np.array([[0.6, 0.6]]), cands, 3, True)  # mean ≈ (0.57, 0.57)
    assert centred[0][0] == 2


def test_dense_with_notes_credits_a_note_with_its_turns() -> None:
    s = stream(n=4, notes=((0, 3),))
    q = s.note_vectors[:1]  # a query equal to the note: the note ranks first
    assert dense_with_notes(s, q, k=1) == [[0, 3]]


# -- generators --------------------------------------------------------------------------------

def test_turn_items_write_turn_context_and_notes_in_stream_order() -> None:
    s = stream(n=4, notes=((1, 2),))
    per = turn_items(s, WeightsPlan(context=1, notes=True))
    assert [it.item_id for it in per[0]] == ["conv-x/t0"]
    assert [it.item_id for it in per[1]] == ["conv-x/t1", "conv-x/c1/t1"]
    assert [it.item_id for it in per[2]] == ["conv-x/t2", "conv-x/c1/t2", "conv-x/n0/t1",
                                             "conv-x/n0/t2"]  # the note after its last turn
    ctx = per[1][1]
    assert np.array_equal(ctx.cue, s.vectors[0]) and np.array_equal(ctx.target, s.vectors[1])
    note = per[2][2]
    assert np.array_equal(note.cue, s.note_vectors[0])
    assert np.array_equal(note.target, s.vectors[1])
    assert all(it.log_time == s.times[2] for it in per[2])
    plain = turn_items(s, WeightsPlan())
    assert [len(p) for p in plain] == [1, 1, 1, 1]


def test_questions_are_asked_n_turns_after_their_last_evidence() -> None:
    s = stream(n=10, asked=((1, 3), (8,)))
    at = st.asked_at(s, grid=(1, 2, 8))
    got = {(a.question.qid, n, end) for end, pairs in at.items() for a, n in pairs}
    assert got == {("q0", 1, 5), ("q0", 2, 6), ("q1", 1, 10)}  # beyond the stream: not asked


def test_state_walk_recalls_near_evidence_and_the_window_is_charged_fairly() -> None:
    s = stream(n=30, asked=((2,), (25,)), seed=3)
    s = Stream(s.conversation, s.texts, s.times, s.vectors,
               tuple(Asked(a.question, a.evidence, s.vectors[a.evidence[0]]) for a in s.asked),
               s.notes, s.note_turns, s.note_vectors)  # each question = its evidence's text
    config = StateConfig(dim=32, gamma_per_hour=1.0)
    points = st.measure(s, config)
    assert sorted(p.n for p in points) == [1, 1, 2, 2, 4, 4, 8, 16]
    assert all(p.state == 1.0 for p in points)  # 30 random keys in d=32: exact recall
    assert st.state_bytes(config) > 30 * 30  # the byte window holds all 30 short turns
    assert all(p.window_bytes == 1.0 for p in points)
    assert min(p.window_budget for p in points) == 1.0  # 2,000 tokens hold them too


def test_default_sources_leave_room_for_the_read_outs() -> None:
    base = default_sources()
    assert [s.share for s in base] == [0.2, 0.5, 0.3]

    class Extra:
        name, title, share = "state", "State", 0.25

        def gather(self, view: object, request: object) -> list[object]:
            return []

    shares = [s.share for s in default_sources([Extra()])]  # type: ignore[list-item]
    assert shares == pytest.approx([0.15, 0.375, 0.225, 0.25])
    assert isinstance(base[0], CurrentFacts) and isinstance(base[1], RelevantRecords)
    assert isinstance(base[2], RecentTurns)


# -- the real actor --------------------------------------------------------------------------

@pytest.mark.slow
def test_stream_through_the_ray_actor_equals_the_joint_solve(tmp_path: object) -> None:
    from pathlib import Path

    import ray

    from memstack.infra.ray import RayConfig, start_ray, stop_ray
    from memstack.infra.ray.paths import short_temp_dir
    from memstack.jobs.eval.openproblems.weights import consolidate_stream
    from memstack.jobs.measure import Report
    from memstack.pipelines.consolidation.actor import applier_class

    s = stream(n=60, asked=((1,), (40,)))
    plan = WeightsPlan(dim=512)
    centre = torch.zeros(384, dtype=torch.float64)
    start_ray(RayConfig(num_cpus=2, num_gpus=0, temp_dir=short_temp_dir(Path(str(tmp_path)))))
    try:
        actor = applier_class(0.0).remote(plan.learner(), centre, "cpu", 1)
        out = consolidate_stream(actor, s, plan, centre, Report("test"))
        ray.kill(actor)
    finally:
        stop_ray()
    assert out.rel_error < 1e-9
    assert out.items == 60
    assert out.early_turn_recall == out.end_turn_recall == [1.0] * 6  # nothing forgotten
    assert set(out.ranked) == {"weights", "vector", "bm25", "vector_with_notes"}
    assert out.ranked["vector"][0][0] == int(np.argmax(s.vectors @ s.asked[0].vector))


def test_batch_and_single_writes_agree() -> None:
    s = stream(n=20)
    plan = WeightsPlan(dim=128)
    items = [it for per in turn_items(s, plan) for it in per]
    centre = torch.zeros(384, dtype=torch.float64)
    learner = RidgeLearner(plan.learner(), centre)
    learner.write_batch(WriteBatch.of([it.item_id for it in items],
                                      torch.from_numpy(np.stack([it.cue for it in items])),
                                      torch.from_numpy(np.stack([it.target for it in items])),
                                      [it.log_time for it in items]))
    joint = joint_weights(items, plan, centre)
    assert np.linalg.norm(learner.weights().numpy() - joint) / np.linalg.norm(joint) < 1e-9


# -- the code ring, the honest window and the long stream ---------------------------------------

def asked_as_evidence(s: Stream) -> Stream:
    """``s`` with each question's vector equal to its first evidence turn's."""
    return Stream(s.conversation, s.texts, s.times, s.vectors,
                  tuple(Asked(a.question, a.evidence, s.vectors[a.evidence[0]]) for a in s.asked),
                  s.notes, s.note_turns, s.note_vectors)


def test_the_ring_walk_recalls_what_it_holds_and_nothing_it_dropped() -> None:
    from memstack.operators.session_state.codes import RingConfig

    s = asked_as_evidence(stream(n=40, asked=((2,), (30,)), seed=5))
    small = RingConfig(bits=128, budget=30 + 8 * 22)  # 8 items
    assert small.capacity == 8
    points = st.measure_ring(s, small)
    by_n = {(p.n, round(p.state)) for p in points}
    assert (1, 1) in by_n and (4, 1) in by_n  # within the last 8 turns: found
    assert {p.state for p in points if p.n >= 8} == {0.0}  # evicted: gone
    assert all(p.window_honest is None for p in points)  # nothing outside its bytes


def test_the_sums_honest_window_is_charged_the_decode_table() -> None:
    s = asked_as_evidence(stream(n=30, asked=((2,),), seed=3))
    points = st.measure(s, StateConfig(dim=8, gamma_per_hour=1.0, dtype="float32"))
    assert all(p.window_honest is not None and p.window_honest >= p.window_bytes for p in points)
    out = st.summary(points)
    assert "window_recall_near_honest" in out


def test_choose_ring_takes_the_largest_far_margin_with_an_early_crossover() -> None:
    from memstack.jobs.eval.openproblems import ring_choice
    from memstack.operators.session_state.codes import RingConfig

    s = asked_as_evidence(stream(n=300, asked=((5,), (100,), (200,)), seed=9))
    s = Stream(s.conversation, tuple(t + "y" * 200 for t in s.texts), s.times, s.vectors,
               s.asked, s.notes, s.note_turns, s.note_vectors)  # windows of a few turns
    grid = (RingConfig(bits=64, budget=400), RingConfig(bits=128, budget=4096),
            RingConfig(bits=128, budget=8192))
    chosen, margins = ring_choice.choose_ring([s], grid, overhead=0)
    assert chosen in margins and margins[chosen] == max(margins.values())
    for config, margin in margins.items():
        out = st.summary(st.measure_ring(s, config))
        assert margin == pytest.approx(out["state_recall_far"] - out["window_recall_far"]
                                       + ring_choice.long_margin([s], config))
        assert 0 < out["crossover_turns"] <= ring_choice.MAX_CROSSOVER
    with pytest.raises(ValueError, match="no ring"):
        ring_choice.choose_ring([stream(n=3)], grid[:1], overhead=0)


def test_the_long_margin_is_the_ring_over_the_prompt_window_at_the_end() -> None:
    from memstack.jobs.eval.openproblems import ring_choice
    from memstack.operators.session_state.codes import RingConfig

    s = asked_as_evidence(stream(n=400, asked=((5,), (380,)), seed=4))
    # 400 turns of ~22 bytes: the 8,000-token prompt holds them all; the ring only the last
    assert ring_choice.long_margin([s], RingConfig(bits=128, budget=30 + 22 * 100)) == -1.0
    # a ring holding every turn finds the far question's evidence too (its query = the turn)
    assert ring_choice.long_margin([s], RingConfig(bits=128, budget=30 + 22 * 400)) == 0.0


def test_the_long_stream_merges_turns_by_time_and_moves_the_evidence_along() -> None:
    from memstack.jobs.eval.openproblems import long_stream

    a = stream(n=4, asked=((1,),), seed=1)
    b = stream(n=4, asked=((3,),), seed=2)
    later = tuple(t + 90 for t in b.times)  # b's turns fall between a's (a minute apart)
    b = Stream(b.conversation, tuple("b" + t for t in b.texts), later, b.vectors, b.asked,
               b.notes, b.note_turns, b.note_vectors)
    long = long_stream.merged([a, b])
    assert long.texts == (a.texts[0], a.texts[1], b.texts[0], a.texts[2], b.texts[1], a.texts[3],
                          b.texts[2], b.texts[3])
    assert [q.evidence for q in long.asked] == [(1,), (7,)]
    assert long.origin == (0, 1)
    assert np.array_equal(long.vectors[2], b.vectors[0])
    assert list(long.times) == sorted(long.times)


def test_long_stream_figures_ask_far_questions_at_the_end() -> None:
    from memstack.jobs.eval.openproblems import long_stream
    from memstack.operators.session_state.codes import RingConfig

    parts = [asked_as_evidence(stream(n=60, asked=((2,), (58,)), seed=c)) for c in range(3)]
    parts = [Stream(p.conversation, tuple(t + "y" * 200 for t in p.texts), p.times, p.vectors,
                    p.asked, p.notes, p.note_turns, p.note_vectors) for p in parts]
    long = long_stream.merged(parts)  # equal times: turns interleave a0 b0 c0 a1 ...
    assert long_stream.far_questions(long) == [0, 2, 4]  # 58 is near the end only in the last
    sums = StateConfig(dim=16, gamma_per_hour=1.0, dtype="float32")
    out = long_stream.figures(long, RingConfig(bits=128, budget=4096), sums)
    assert out["long_turns"] == 180 and out["long_questions_far"] == 3
    assert out["long_state_recall_far"] == 1.0  # 180 turns fit the ring; queries = evidence
    assert out["long_window_recall_far"] == 0.0  # 4 KB of ~220-byte turns: the last 18
    assert out["long_window8k_turns"] < 180 and out["long_window8k_recall_far"] == 0.0
    assert out["long_sums_state_bytes"] == st.state_bytes(sums)
    assert out["long_sums_window_honest_recall_far"] >= out["long_sums_window_recall_far"]
    assert out["long_state_recall_far_heldout"] == 1.0
