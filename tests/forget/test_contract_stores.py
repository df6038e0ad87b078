"""The shared forget contract on DuckDB and LanceDB."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from memstack.pipelines.embedding import MiniLMEncoder
from tests.forget.contract import ForgetContract, Make
from tests.forget.stores import DuckDBUnderTest, LanceUnderTest


class TestDuckDBForgets(ForgetContract):
    @pytest.fixture
    def make(self, tmp_path: Path) -> Make:
        counter = itertools.count()
        return lambda: DuckDBUnderTest(tmp_path / f"db{next(counter)}" / "memstack.duckdb")


class TestLanceForgets(ForgetContract):
    @pytest.fixture
    def make(self, tmp_path: Path, minilm: MiniLMEncoder) -> Make:
        counter = itertools.count()
        return lambda: LanceUnderTest(tmp_path / f"lance{next(counter)}", minilm)
