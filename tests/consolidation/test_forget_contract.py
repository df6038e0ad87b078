"""The shared forget contract (tests/forget/contract.py) on the consolidated weights.

Two contract tests assume every store holds every event; the learners hold only *current* fact
values, so they are adapted here (same property, events the store holds): residuals are probed
with a current fact (Porto) rather than a note, and the other tenant gets a fact of its own.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from memstack.operators.consolidation import RidgeLearner
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.forgetting.contract import AuditProbe
from tests.consolidation.givens import Consolidated
from tests.forget.contract import ForgetContract, Make, _forget
from tests.forget.givens import event_request, memory, request
from tests.forget.reference import resolve_events
from tests.pipelines.helpers import builder, logged


class TestConsolidationForgets(ForgetContract):
    @pytest.fixture
    def make(self, tmp_path: Path, minilm: MiniLMEncoder, centre: torch.Tensor) -> Make:
        counter = itertools.count()
        return lambda: Consolidated(tmp_path / f"c{next(counter)}", minilm, centre)

    def test_residuals_see_what_was_not_forgotten_yet(self, make: Make) -> None:
        events, sut = memory(), make()
        sut.load(events)
        porto = events[4]  # ana lives_in Porto: the current value, so consolidated
        probe = AuditProbe.of(resolve_events(event_request(porto), events))
        assert sum(r.count for r in sut.store.residuals(probe)) > 0

    def test_other_tenants_are_untouched(self, make: Make) -> None:
        events = [*memory(), logged(builder("other").fact("s1", "org:x", "owner", "Ines"), 10)]
        sut = make()
        sut.load(events)
        before = sut.visible_ids("other")
        _forget(sut, events, request({"type": "tenant"}))
        assert sut.visible_ids("other") == before and before


def test_forgotten_items_leave_sums_equal_to_a_rebuild_and_old_checkpoints_clean(
    tmp_path: Path, minilm: MiniLMEncoder, centre: torch.Tensor
) -> None:
    events = memory()
    sut = Consolidated(tmp_path / "c", minilm, centre)
    sut.load(events[:4])   # checkpoint 1: ana lives in Lisbon
    sut.load(events[4:])   # checkpoint 2: Porto superseded it; sardines; bob in Faro
    assert len(sut.checkpoints.manifests()) == 2
    req = request({"type": "session", "session": "s2"})
    probe = _forget(sut, events, req)
    assert sut.store.residuals(probe) == []
    for manifest in sut.checkpoints.manifests():  # every retained checkpoint was rewritten
        restored = sut.checkpoints.load_shard(manifest, "acme")
        assert restored is not None
        learner = restored.learner
        assert not set(restored.meta["sources"].values()) & probe.event_ids
        scratch = RidgeLearner.rebuild(learner.config, learner.features.centre,
                                       learner.log.live(), device="cpu")
        for got, want in zip(learner.sums(), scratch.sums(), strict=True):
            assert float((got - want).norm() / max(float(want.norm()), 1e-300)) <= 1e-9
    # Lisbon is current again (Porto was forgotten): the latest checkpoint holds it.
    assert len(sut.latest_banks()[0].learners["acme"].log) == 1
