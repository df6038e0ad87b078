"""Fixtures of the forget tests: the real embedding model, loaded once per session, and the
environment that points the ``memstack`` command line at a test's topics."""

from __future__ import annotations

import pytest

from memstack.foundation.settings import Settings
from memstack.jobs.run import worker_env
from memstack.pipelines.embedding import MiniLMEncoder, shared_encoder


@pytest.fixture(scope="session")
def minilm() -> MiniLMEncoder:
    return shared_encoder().load()


@pytest.fixture
def cli_topics(topics: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``topics``, with ``MEMSTACK_*`` set so that ``memstack.cli.main`` uses them."""
    for name, value in worker_env(topics).items():
        if name.startswith("MEMSTACK_"):
            monkeypatch.setenv(name, value)
    return topics
