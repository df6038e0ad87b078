"""Fixtures of the view tests: the scenario of :mod:`givens`, projected once per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstack.pipelines.embedding import MiniLMEncoder, shared_encoder
from memstack.pipelines.stores.bundle import Stores
from memstack.view import MemoryView
from tests.view.givens import project, scenario


@pytest.fixture(scope="session")
def encoder() -> MiniLMEncoder:
    return shared_encoder().load()


@pytest.fixture(scope="session")
def scenario_dir(tmp_path_factory: pytest.TempPathFactory, encoder: MiniLMEncoder) -> Path:
    directory = tmp_path_factory.mktemp("view") / "stores"
    project(directory, scenario(), encoder)
    return directory


@pytest.fixture(scope="session")
def stores(scenario_dir: Path) -> Iterator[Stores]:
    with Stores.open(scenario_dir, read_only=True) as opened:
        yield opened


@pytest.fixture
def acme(stores: Stores, encoder: MiniLMEncoder) -> MemoryView:
    return MemoryView("acme", stores, encoder=encoder)
