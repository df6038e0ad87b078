"""Closed-book recall through the read side: checkpoints as of a known time, nearest known value,
and the context source."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.stores.bundle import Stores
from memstack.view import MemoryView
from memstack.view.errors import InvalidQueryError
from memstack.view.recall import RecalledFacts, RecallReader
from tests.consolidation.givens import Consolidated
from tests.pipelines.helpers import at, builder, logged, year


@pytest.fixture
def consolidated(tmp_path: Path, minilm: MiniLMEncoder, centre: torch.Tensor) -> Consolidated:
    b = builder()
    sut = Consolidated(tmp_path, minilm, centre)
    sut.load([logged(b.fact("s1", "user:ana", "lives_in", "Lisbon", valid_from=year(2020)), 1),
              logged(b.fact("s1", "user:bob", "lives_in", "Faro", valid_from=year(2020)), 2)])
    sut.load([logged(b.fact("s1", "user:ana", "lives_in", "Porto", valid_from=year(2022)), 3),
              logged(b.fact("s1", "user:ana", "drinks", "green tea"), 4),
              logged(b.fact("s1", "user:bob", "drinks", "espresso"), 5)])
    return sut


def test_recall_decodes_the_current_value_and_as_of_an_earlier_checkpoint(
    consolidated: Consolidated, minilm: MiniLMEncoder
) -> None:
    reader = RecallReader(consolidated.root, consolidated.events, minilm)
    now = reader.recall("acme", "user:ana lives_in")
    assert (now.subject, now.relation, now.value) == ("user:ana", "lives_in", "Porto")
    assert now.confidence > 0.5 and now.candidates == 3  # Faro, Lisbon, Porto
    assert reader.recall("acme", "user:bob drinks").value == "espresso"
    before = reader.recall("acme", "user:ana lives_in", known=at(2))
    assert before.value == "Lisbon" and before.checkpoint != now.checkpoint
    assert before.candidates == 2  # Porto was not known yet
    nothing = reader.recall("acme", "user:ana lives_in", known=at(0))
    assert nothing.value is None and nothing.confidence == 0.0
    with pytest.raises(InvalidQueryError, match="relation known"):
        reader.recall("acme", "user:ana plays")


def test_recall_feeds_the_context(consolidated: Consolidated, minilm: MiniLMEncoder,
                                  tmp_path: Path) -> None:
    reader = RecallReader(consolidated.root, consolidated.events, minilm)
    stores = Stores(tmp_path, consolidated.events, None)  # type: ignore[arg-type]  # no search
    view = MemoryView("acme", stores, encoder=minilm, context_sources=[RecalledFacts(reader)])
    context = view.context("where does ana live", subject="user:ana")
    lines = [i.text for i in context.items]
    assert any(t.startswith("user:ana lives_in Porto (recalled") for t in lines), lines
    assert any(t.startswith("user:ana drinks green tea") for t in lines), lines
    assert all(i.source == "recall" for i in context.items)
