"""``memstack eval forget`` on a short conversation: the oracle and its generator, and two
negative controls that must score 0 (an evaluation a wrong system can pass is no evaluation)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memstack.jobs.eval.forget import eval_dir, run
from memstack.jobs.eval.forget_oracle import in_scope
from memstack.jobs.measure import Report
from memstack.operators.forget import ForgetRequest
from memstack.pipelines.forgetting import ForgetOutcome, ForgetProcessor
from memstack.schemas.events import ForgetScope
from memstack.schemas.ids import uuid7
from memstack.settings import Settings
from tests.forget.givens import memory

MIX = {"event": 3, "fact": 2, "session": 1, "subject": 1, "tenant": 1}


def locomo() -> Path:
    """LoCoMo's file (outside the repository: ``MEMSTACK_EVAL_DIR`` or the shared folder)."""
    for root in (eval_dir(), Path("/work/shared/eval")):
        if (root / "locomo" / "locomo10.json").exists():
            return root / "locomo" / "locomo10.json"
    pytest.skip("LoCoMo is not here; set MEMSTACK_EVAL_DIR to the folder holding locomo/")


def short_conversation(sessions: int = 4) -> dict[str, Any]:
    conv = json.loads(locomo().read_text())[0]
    c = conv["conversation"]
    kept = {k: v for k, v in c.items() if not k.startswith("session_") or
            int(k.split("_")[1]) <= sessions}
    return {**conv, "conversation": kept}


class DeleteNothing(ForgetProcessor):
    """Negative control: claims every request done and erases nothing."""

    def apply(self, request: ForgetRequest) -> ForgetOutcome:
        nothing = ForgetScope(type="event", event_id=str(uuid7()))
        return super().apply(replace(request, scope=nothing))


class DeleteTenant(ForgetProcessor):
    """Negative control: erases the request's whole tenant, whatever the scope."""

    def apply(self, request: ForgetRequest) -> ForgetOutcome:
        return super().apply(replace(request, scope=ForgetScope(type="tenant")))


def test_oracle_scope_reading_follows_the_documented_semantics() -> None:
    events = [e.event for e in memory()]
    at = {e.event_id: datetime(2025, 1, 1, tzinfo=UTC) for e in events}
    later = datetime(2026, 1, 1, tzinfo=UTC)
    fact = ForgetScope(type="fact", subject="user:ana", relation="lives_in")
    assert {e.payload.object for e in events  # type: ignore[union-attr]
            if in_scope(fact, "acme", later, e, at[e.event_id])} == {"Lisbon", "Porto"}
    tenant = ForgetScope(type="tenant")
    assert not any(in_scope(tenant, "acme", datetime(2024, 1, 1, tzinfo=UTC), e, at[e.event_id])
                   for e in events)  # logged after the request: new data, kept
    assert {e.tenant for e in events if in_scope(tenant, "acme", later, e, at[e.event_id])} \
        == {"acme"}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("processor, expected", [(ForgetProcessor, 1.0), (DeleteNothing, 0.0),
                                                 (DeleteTenant, 0.0)])
def test_eval_scores_the_system_and_zero_for_both_negative_controls(
        cli_topics: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        processor: type[ForgetProcessor], expected: float) -> None:
    monkeypatch.chdir(tmp_path)
    result = run(True, Report("eval forget test"), processor, [short_conversation()], MIX)
    f = result.figures
    assert f["requests"] == sum(MIX.values()) and f["generator_errors"] == 0
    assert f["pass_rate"] == expected, f
    if processor is ForgetProcessor:
        assert f["oracle_equal_rate"] == 1.0 and f["preservation_rate"] == 1.0
    elif processor is DeleteNothing:
        assert f["oracle_equal_rate"] < 0.5
    else:
        assert f["preservation_rate"] == 0.0
