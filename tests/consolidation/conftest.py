"""Fixtures of the consolidation tests: the real embedding model and its centring vector."""

from __future__ import annotations

import pytest
import torch

from memstack.pipelines.consolidation.distill import reference_centre
from memstack.pipelines.embedding import MiniLMEncoder, shared_encoder


@pytest.fixture(scope="session")
def minilm() -> MiniLMEncoder:
    return shared_encoder().load()


@pytest.fixture(scope="session")
def centre(minilm: MiniLMEncoder) -> torch.Tensor:
    return reference_centre(minilm)
