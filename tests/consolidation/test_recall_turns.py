"""``RecalledTurns``: the weights' closed-book read of a session's turns, as a context source;
and a view given a state reader includes the state's read-out by default."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from memstack.operators.consolidation import FeatureConfig, LearnerConfig, RidgeLearner, WriteBatch
from memstack.pipelines.embedding import MiniLMEncoder, shared_encoder
from memstack.pipelines.stores.bundle import Stores
from memstack.view import MemoryView
from memstack.view.recall import RecalledTurns
from memstack.view.state import DictSource, SessionStateReader
from tests.view.givens import project, scenario


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    directory = tmp_path_factory.mktemp("turns") / "stores"
    project(directory, scenario(), shared_encoder())
    with Stores.open(directory, read_only=True) as opened:
        yield opened


def learner_of_session(stores: Stores, session: str) -> RidgeLearner:
    """A learner holding the session's turns (cue = value = the stored vector)."""
    rows = [r for r in stores.events.records("acme", session=session) if r.text]
    vectors = torch.from_numpy(np.asarray(stores.vectors.vectors_of([r.event_id for r in rows])))
    learner = RidgeLearner(LearnerConfig(features=FeatureConfig(dim=256, bandwidth=1.0)),
                           torch.zeros(384, dtype=torch.float64))
    learner.write_batch(WriteBatch.of([r.event_id for r in rows], vectors, vectors, 0.0))
    return learner


def test_recalled_turns_reads_the_sessions_turns_from_the_weights(stores: Stores) -> None:
    encoder: MiniLMEncoder = shared_encoder()
    learner = learner_of_session(stores, "s1")
    source = RecalledTurns(lambda tenant, session: learner if session == "s1" else None,
                           encoder, k=2, kinds=("note",))
    view = MemoryView("acme", stores, encoder=encoder, context_sources=[source])
    context = view.context("Ana moved to Porto", 200, session="s1")
    assert context.items[0].source == "weights"
    assert context.items[0].text == "[note] Ana moved to Porto"
    assert len(context.items) == 2
    assert all(i.session == "s1" for i in context.items)
    assert view.context("Ana moved to Porto", 200, session="s2").items == ()  # no learner


def test_a_view_with_a_state_reader_puts_the_state_in_the_context(stores: Stores) -> None:
    reader = SessionStateReader(stores, shared_encoder(), DictSource({}))
    view = MemoryView("acme", stores, encoder=shared_encoder(), state=reader)
    assert [s.name for s in view.context_sources] == ["facts", "relevant", "recent", "state"]
    assert sum(s.share for s in view.context_sources) == pytest.approx(1.0)
    plain = MemoryView("acme", stores, encoder=shared_encoder())
    assert [s.name for s in plain.context_sources] == ["facts", "relevant", "recent"]


def test_sessions_without_turns_give_nothing(stores: Stores, tmp_path: Path) -> None:
    source = RecalledTurns(lambda tenant, session: learner_of_session(stores, "s1"),
                           shared_encoder())
    view = MemoryView("acme", stores, encoder=shared_encoder(), context_sources=[source])
    assert view.context("anything", 200, session="nope").items == ()
