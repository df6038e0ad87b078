"""The peers bench's parts, by hand: the figures and goals, the turn order, the Mem0 adapter's
pure pieces (sessions, messages, stored ids, configuration), and the missing-Mem0 error. None
of these needs Mem0 or a broker."""

from __future__ import annotations

import importlib.metadata
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memstack.foundation.errors import MemstackError
from memstack.jobs.bench.peers import mem0_side, runner
from memstack.jobs.bench.peers.figures import best, goal_lines, order, percentile_ms, summarise
from memstack.jobs.bench.peers.memstack_side import turn_events
from memstack.jobs.bench.peers.runner import PeersResult, compare
from memstack.jobs.bench.peers.sides import Hits, Side
from memstack.jobs.eval.locomo_data import Conversation, Observation, Question, Turn
from memstack.jobs.measure import Report

AT = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


class Fixed:
    """A searcher that is never asked (the figures are computed from ``got``)."""

    def search(self, question: str, conversation: str) -> Hits:
        raise AssertionError("not searched here")


def _conversation() -> Conversation:
    turns = (Turn("D1:1", "Ana", "Ana: Hi Bo!", AT), Turn("D1:2", "Bo", "Bo: Hey Ana.", AT),
             Turn("D2:1", "Bo", "Bo: I moved to Porto.", AT))
    return Conversation("conv-1", ("Ana", "Bo"), turns,
                        (Observation("Bo", "Bo moved.", ("D2:1",), AT),),
                        (Question("q1", "Where did Bo move?", ("D2:1",), 4),))


def test_the_order_rotates_by_one_per_question() -> None:
    names = ["memstack", "mem0_st", "mem0_onnx"]
    assert order(names, 0) == names
    assert order(names, 1) == ["mem0_st", "mem0_onnx", "memstack"]
    assert order(names, 3) == names
    assert [order(names, i)[0] for i in range(3)] == names  # each side goes first as often


def test_percentiles_are_in_milliseconds() -> None:
    assert percentile_ms([0.010, 0.020, 0.030], 50) == pytest.approx(20.0)
    assert percentile_ms([], 50) != percentile_ms([], 50)  # NaN when nothing was timed


def test_figures_score_every_side_with_the_same_oracle_and_take_mem0_at_its_best() -> None:
    questions = [Question("q1", "?", ("D1:1", "D1:2"), 1), Question("q2", "?", ("D1:3",), 2)]
    got = {("q1", "memstack"): [("D1:1",), ("D1:2",)], ("q2", "memstack"): [("D1:3",)],
           ("q1", "mem0_st"): [("D1:9",), ("D1:1",)], ("q2", "mem0_st"): [("D1:3",)],
           ("q1", "mem0_onnx"): [("D1:9",)], ("q2", "mem0_onnx"): [("D1:3",)]}
    sides = [Side("memstack", 10.0, 500, Fixed()), Side("mem0_st", 50.0, 500, Fixed()),
             Side("mem0_onnx", 5.0, 500, Fixed())]
    seconds = {"memstack": [0.020, 0.030], "mem0_st": [0.100, 0.100],
               "mem0_onnx": [0.025, 0.035]}
    figures, chosen = summarise(sides, questions, got, seconds)
    assert figures["memstack_recall@10"] == 1.0
    assert figures["mem0_st_recall@10"] == pytest.approx((0.5 + 1.0) / 2)
    assert figures["mem0_onnx_recall@10"] == pytest.approx((0.0 + 1.0) / 2)
    assert figures["mem0_recall@10"] == pytest.approx(0.75)
    assert chosen["mem0_recall@10"] == "mem0_st"
    assert figures["mem0_ingest_turns_per_s"] == 100.0
    assert chosen["mem0_ingest_turns_per_s"] == "mem0_onnx"
    assert figures["mem0_search_p50_ms"] == pytest.approx(30.0)
    assert chosen["mem0_search_p50_ms"] == "mem0_onnx"
    assert figures["recall_lead@10"] == pytest.approx(0.25)
    assert figures["ingest_ratio"] == pytest.approx(50.0 / 100.0)
    assert figures["search_p50_ratio"] == pytest.approx(25.0 / 30.0)
    assert (figures["turns"], figures["questions"]) == (500.0, 2.0)
    lines = goal_lines(figures)
    assert lines == ["recall_lead@10 0.250 >= 0.2: met", "ingest_ratio 0.500 >= 5: missed",
                     "search_p50_ratio 0.833 <= 1: met"]


def test_best_prefers_high_recall_and_rate_and_low_latency() -> None:
    figures = {f"{p}_{f}": v for p, values in (("a", (0.5, 0.6, 10.0, 20.0, 90.0)),
                                                ("b", (0.4, 0.7, 30.0, 10.0, 80.0)))
               for f, v in zip(("recall@5", "recall@10", "ingest_turns_per_s", "search_p50_ms",
                                "search_p99_ms"), values, strict=True)}
    assert best(figures, ["a", "b"]) == {
        "recall@5": (0.5, "a"), "recall@10": (0.7, "b"), "ingest_turns_per_s": (30.0, "b"),
        "search_p50_ms": (10.0, "b"), "search_p99_ms": (80.0, "b")}


def test_memstack_gets_the_turns_only_each_citing_its_own_turn() -> None:
    events, cites = turn_events([_conversation()])
    assert [e.kind for e in events] == ["message"] * 3
    assert [cites[e.event_id] for e in events] == [("D1:1",), ("D1:2",), ("D2:1",)]


def test_mem0_gets_the_same_turns_by_session_with_the_same_roles() -> None:
    conv = _conversation()
    groups = mem0_side.sessions(conv)
    assert [[t.dia_id for t in g] for g in groups] == [["D1:1", "D1:2"], ["D2:1"]]
    assert mem0_side.messages(conv, groups[0]) == [
        {"role": "user", "content": "Ana: Hi Bo!"},
        {"role": "assistant", "content": "Bo: Hey Ana."}]


def test_stored_ids_map_mem0_memories_to_their_turns_in_order() -> None:
    turns = list(_conversation().turns[:2])
    answer = {"results": [{"id": "m-1", "event": "ADD"}, {"id": "m-2", "event": "ADD"}]}
    assert mem0_side.stored_ids(answer, turns) == {"m-1": "D1:1", "m-2": "D1:2"}
    with pytest.raises(MemstackError, match="stored 1 memories for 2 turns"):
        mem0_side.stored_ids({"results": [{"id": "m-1"}]}, turns)


def test_the_mem0_configuration_is_local_and_offline(tmp_path: Path) -> None:
    config = mem0_side.memory_config(tmp_path, "st")
    store = config["vector_store"]
    assert store["provider"] == "qdrant" and store["config"]["path"].startswith(str(tmp_path))
    assert store["config"]["embedding_model_dims"] == 384
    embedder = config["embedder"]["config"]
    assert Path(embedder["model"]).is_dir()  # the packaged all-MiniLM-L6-v2 folder
    assert config["llm"]["config"]["openai_base_url"].startswith("http://127.0.0.1:")
    assert config["history_db_path"].startswith(str(tmp_path))


def test_the_result_line_carries_notes_and_strict_json() -> None:
    line = PeersResult("bench peers", {"a": 1.0, "b": float("nan")}, ratio=0.5,
                       notes=["how it ran"]).to_json()
    body = json.loads(line)
    assert "\n" not in line and body["notes"] == ["how it ran"]
    assert body["figures"] == {"a": 1.0, "b": None} and body["ratio"] == 0.5


def test_without_mem0_the_bench_says_what_to_install_before_starting_anything(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.version

    def version(package: str) -> str:
        if package == "mem0ai":
            raise importlib.metadata.PackageNotFoundError(package)
        return real(package)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(runner, "scratch_deployment", None)  # would fail if reached
    with pytest.raises(mem0_side.Mem0NotInstalledError, match=r"pip install 'memstack\[peers\]'"):
        compare([_conversation()], Report("test"))
