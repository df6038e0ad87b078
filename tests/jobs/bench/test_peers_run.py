"""The peers bench end to end on a small slice of LoCoMo (the first 40 turns of one conversation
and the questions they answer): memstack through the test broker, Mem0 with both embedders,
the same questions, one JSON line. Skipped where Mem0 (``memstack[peers]``, which CI does not
install) or the LoCoMo data is missing; ~30 s here."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

from memstack.jobs.bench.peers.runner import compare
from memstack.jobs.eval.locomo_data import Conversation, EvalDataMissingError, eval_dir, load
from memstack.jobs.measure import Report

TURNS = 40


def _missing() -> str | None:
    if importlib.util.find_spec("mem0") is None or importlib.util.find_spec("fastembed") is None:
        return "Mem0 is not installed: pip install 'memstack[peers]'"
    try:
        eval_dir()
    except EvalDataMissingError:
        return "LoCoMo data not found (the shared eval folder; set MEMSTACK_EVAL_DIR)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


def _slice() -> Conversation:
    conv = load(1)[0]
    kept = conv.turns[:TURNS]
    ids = {t.dia_id for t in kept}
    return replace(conv, turns=kept, questions=tuple(
        q for q in conv.questions if q.evidence and set(q.evidence) <= ids))


def test_both_systems_answer_the_same_questions_scored_alike(
        kafka: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_BOOTSTRAP", kafka.bootstrap)  # type: ignore[attr-defined]
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "home"))
    for name in ("MEM0_TELEMETRY", "MEM0_DIR", "HF_HUB_OFFLINE"):  # the bench sets them:
        monkeypatch.delenv(name, raising=False)                     # taken back after the test
    conv = _slice()
    result = compare([conv], Report("test peers"))
    body = json.loads(result.to_json())
    figures = body["figures"]
    assert figures["turns"] == TURNS and figures["questions"] == len(conv.questions) > 10
    for side in ("memstack", "mem0_st", "mem0_onnx", "mem0"):
        for k in (5, 10):
            assert 0.0 <= figures[f"{side}_recall@{k}"] <= 1.0
        assert figures[f"{side}_ingest_turns_per_s"] > 0
        assert 0 < figures[f"{side}_search_p50_ms"] <= figures[f"{side}_search_p99_ms"]
    assert figures["mem0_recall@10"] == max(figures["mem0_st_recall@10"],
                                            figures["mem0_onnx_recall@10"])
    assert figures["memstack_recall@10"] > 0.5  # the product's ranking on its own data
    assert figures["mem0_keyword_leg"] == 1.0  # Mem0's BM25 leg answered, offline
    assert body["ratio"] == pytest.approx(figures["ingest_ratio"], rel=1e-3)
    assert len(body["notes"]) == 5 and body["notes"][-1].startswith("goals: recall_lead@10")
