"""Fixtures of the forget tests: the real embedding model, loaded once per session."""

from __future__ import annotations

import pytest

from memstack.pipelines.embedding import MiniLMEncoder, shared_encoder


@pytest.fixture(scope="session")
def minilm() -> MiniLMEncoder:
    return shared_encoder().load()
