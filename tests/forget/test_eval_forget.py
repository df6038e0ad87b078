"""``memstack eval forget``: its generator, its oracle, and the grading run for real against
the system and two negative controls that must score 0 (an evaluation a wrong system can pass
is no evaluation)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from memstack.client import MemoryClient
from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.jobs.eval.forget import MIX as MIX_FULL
from memstack.jobs.eval.forget import extraction_problem, kept_items, run
from memstack.jobs.eval.forget.oracle import CleanBuild, in_scope, matches
from memstack.jobs.eval.forget.scopes import (
    GeneratorError,
    Scope,
    emit_locomo,
    pick_scopes,
    tenants_to_forget,
)
from memstack.jobs.eval.locomo_data import eval_dir
from memstack.jobs.measure import Report
from memstack.operators.forget import ForgetRequest
from memstack.operators.relations import RelationRegistry
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.forgetting import (
    ForgetLedger,
    ForgetOutcome,
    ForgetProcessor,
    rebuild_forgetting,
)
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event, ForgetScope
from memstack.schemas.ids import uuid7
from tests.forget.givens import memory

MIX = {"event": 3, "fact": 2, "session": 1, "subject": 1, "tenant": 1}


def locomo() -> Path:
    """LoCoMo's file (outside the repository: ``MEMSTACK_EVAL_DIR`` or the shared folder)."""
    for root in (Path("/work/shared/eval"),):
        if (root / "locomo" / "locomo10.json").exists():
            return root / "locomo" / "locomo10.json"
    return eval_dir() / "locomo" / "locomo10.json"


def short_conversation(sessions: int = 4) -> dict[str, Any]:
    conv: dict[str, Any] = json.loads(locomo().read_text())[0]
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
    one = ForgetScope(type="fact", subject="user:ana", relation="lives_in", object="Porto")
    assert [e.payload.object for e in events  # type: ignore[union-attr]
            if matches(one, "acme", e)] == ["Porto"]
    tenant = ForgetScope(type="tenant")
    assert not any(in_scope(tenant, "acme", datetime(2024, 1, 1, tzinfo=UTC), e, at[e.event_id])
                   for e in events)  # logged after the request: new data, kept
    assert {e.tenant for e in events if in_scope(tenant, "acme", later, e, at[e.event_id])} \
        == {"acme"}
    session = ForgetScope(type="session", session="s1")
    assert {e.tenant for e in events if matches(session, "other", e)} == {"other"}


def _check_generated(events: list[Event], scopes: list[Scope]) -> None:
    """Each request forgets something new and leaves a message of its tenant."""
    gone: set[str] = set()
    for tenant, scope in scopes:
        covered = {e.event_id for e in events if matches(scope, tenant, e)}
        assert covered - gone, scope
        gone |= covered
        assert any(e.tenant == tenant and e.kind == "message" and e.event_id not in gone
                   for e in events), scope


def test_generator_leaves_something_to_preserve_in_every_request() -> None:
    events = [e.event for e in memory()]
    for seed in range(20):
        scopes = pick_scopes(events, {"event": 1, "fact": 2, "session": 1, "subject": 1},
                             random.Random(seed))
        assert [s.type for _, s in scopes] == ["event", "fact", "fact", "session", "subject"]
        _check_generated(events, scopes)


def test_generator_raises_when_no_request_can_keep_something() -> None:
    events = [e.event for e in memory()]
    with pytest.raises(GeneratorError):  # acme has three sessions: forgetting all keeps none
        pick_scopes(events, {"session": 3}, random.Random(1))
    with pytest.raises(GeneratorError):  # 'other' holds one message: no event request there
        pick_scopes([e for e in events if e.tenant == "other"], {"event": 1}, random.Random(1))


def test_generator_keeps_what_is_logged_after_a_tenant_request() -> None:
    events = [e.event for e in memory()]
    later = [e for e in events if e.tenant == "acme" and e.session == "s3"]
    scopes = pick_scopes(events, {"event": 2, "session": 1}, random.Random(3), later)
    assert scopes[-1] == ("acme", ForgetScope(type="tenant"))
    assert all(s != ForgetScope(type="session", session="s3") for t, s in scopes if t == "acme")
    for _, s in scopes:  # the last session's only message is never forgotten before it
        assert not matches(s, "acme", later[0]) or s.type == "tenant"


def test_generator_makes_the_full_mix_over_locomo() -> None:
    """The full run's 205 requests exist over the ten conversations, each checkable."""
    convs = json.loads(locomo().read_text())
    rng = random.Random(5)
    tenants = tenants_to_forget(convs, MIX_FULL["tenant"], rng)
    builder = EventBuilder(Defaults(tenant="locomo", agent="eval"))
    events, later = [], []
    for conv in convs:
        tenant = str(conv["sample_id"])
        events += emit_locomo(builder, conv, False if tenant in tenants else None)
    for conv in convs:
        if str(conv["sample_id"]) in tenants:
            later += emit_locomo(builder, conv, True)
    scopes = pick_scopes(events + later, MIX_FULL, rng, later)
    assert len(scopes) == sum(MIX_FULL.values()) >= 200
    assert {t for t, s in scopes if s.type == "tenant"} == tenants
    _check_generated(events + later, [s for s in scopes if s[1].type != "tenant"])


def test_kept_items_with_nothing_left_is_a_generator_error() -> None:
    events = [e.event for e in memory()]
    gone = {e.event_id for e in events if e.tenant == "other"}
    present = {e.event_id for e in events}
    assert len(kept_items(events, gone, present, "acme")) == 3  # the three acme messages
    with pytest.raises(GeneratorError):
        kept_items(events, gone, present, "other")


def test_clean_build_oracle_sees_a_missing_and_a_left_over_row(
        topics: Settings, tmp_path: Path, minilm: MiniLMEncoder) -> None:
    events = [e.event for e in memory()]
    with MemoryClient("acme", "t", settings=topics) as client:
        for e in events:
            client.emit(e)
        client.flush()
    registry = RelationRegistry()
    rebuild_forgetting(topics.bootstrap, topics.events_topic, tmp_path / "live", ForgetLedger(),
                       FileKeyStore(topics.keys_dir), encoder=minilm, registry=registry)
    oracle = CleanBuild(topics.bootstrap, topics.events_topic, events, tmp_path, minilm,
                        registry)
    victim, kept = events[0], events[3]
    with Stores.open(tmp_path / "live") as live:
        oracle.remember_live(live)
        same = oracle.compare(live, set(), [], [kept.event_id])
        assert same.equal and same.preserved, same.differing
        left_over = oracle.compare(live, {victim.event_id}, [victim.text() or ""],
                                   [kept.event_id])
        assert not left_over.equal and left_over.preserved
        assert {"records", "memories", "text_hits"} <= set(left_over.differing)
        nothing = oracle.compare(live, {victim.event_id}, [], [])
        assert not nothing.preserved  # nothing to preserve never passes


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("processor", [ForgetProcessor, DeleteNothing, DeleteTenant])
def test_eval_scores_the_system_and_zero_for_both_negative_controls(
        cli_topics: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        processor: type[ForgetProcessor]) -> None:
    monkeypatch.chdir(tmp_path)
    result = run(True, Report("eval forget test"), processor, [short_conversation()], MIX)
    f = result.figures
    assert f["requests"] == sum(MIX.values()) and f["kept_items"] > 0
    if processor is ForgetProcessor:
        assert f["oracle_equal_rate"] == 1.0 and f["preservation_rate"] == 1.0, f
        assert f["pass_rate"] == 1.0, f
    elif processor is DeleteNothing:
        assert f["oracle_equal_rate"] == 0.0 and f["pass_rate"] == 0.0, f
    else:
        assert f["preservation_rate"] == 0.0 and f["oracle_equal_rate"] == 0.0, f
        assert f["pass_rate"] == 0.0, f


class _Hits:
    """Search results standing for the stores' (the rule under test is pure: which hit
    counts as forgotten content)."""

    def __init__(self, rows: list[tuple[str, str]]) -> None:
        self.hits = [SimpleNamespace(row=SimpleNamespace(event_id=i, text=t)) for i, t in rows]

    def search_text(self, query: str, *, tenant: str, k: int) -> list[Any]:
        return self.hits

    def search_vector(self, vector: Any, *, tenant: str, k: int) -> list[Any]:
        return self.hits


def test_extraction_check_tells_a_copy_from_a_kept_event_saying_the_same_words() -> None:
    words = "Thanks so much for the help with the garden today"

    def problem(rows: list[tuple[str, str]], said: dict[str, str]) -> str | None:
        stores = cast(Stores, SimpleNamespace(vectors=_Hits(rows)))
        return extraction_problem(stores, "t", {"gone"}, [words], [], said)

    assert problem([("kept", words)], {"kept": words}) is None  # it said so itself
    copy = problem([("copy", words)], {"kept": words})
    assert copy is not None and "copy" in copy  # the same words under another row: a copy
    found = problem([("gone", "anything")], {})
    assert found is not None and "forgotten gone" in found
    assert problem([("other", "something else entirely")], {"other": "x"}) is None
