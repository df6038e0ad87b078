"""LanceVectorIndex: the VectorIndex contract, plus index maintenance and error translation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lancedb
import pyarrow as pa
import pytest

from memstack.pipelines.stores.base import VectorIndex
from memstack.pipelines.stores.errors import StoreNotFoundError, StoreSchemaError, StoreWriteError
from memstack.pipelines.stores.lance_index import (
    TABLE,
    TEXT_INDEX,
    VECTOR_INDEX,
    IndexPolicy,
    LanceVectorIndex,
    translated,
)
from tests.pipelines.helpers import unit_vectors
from tests.pipelines.vector_index_contract import VectorIndexContract, rows_of


class TestLanceVectorIndex(VectorIndexContract):
    @pytest.fixture
    def vectors(self, tmp_path: Path) -> Iterator[LanceVectorIndex]:
        self._dir = tmp_path / "lance"
        yield LanceVectorIndex(self._dir)

    def reader(self, index: VectorIndex) -> VectorIndex:
        return LanceVectorIndex(self._dir, read_only=True)


def test_indexes_are_built_as_the_table_grows(tmp_path: Path) -> None:
    policy = IndexPolicy(vector_min_rows=300, refresh_min_rows=100, num_sub_vectors=8)
    index = LanceVectorIndex(tmp_path / "lance", policy=policy)
    rows, vecs = rows_of(420), unit_vectors(420)
    index.merge(rows[:50], vecs[:50])
    built = {i.name for i in index._table.list_indices()}
    assert TEXT_INDEX in built and "tenant_idx" in built and VECTOR_INDEX not in built
    index.merge(rows[50:320], vecs[50:320])
    assert VECTOR_INDEX in {i.name for i in index._table.list_indices()}
    index.merge(rows[320:], vecs[320:])  # 100 more rows: due for a refresh (optimize)
    stats = index._table.index_stats(VECTOR_INDEX)
    assert stats is not None and stats.num_unindexed_rows == 0
    hits = index.search_vector(vecs[400], tenant="acme", k=3)  # IVF_PQ + refine: exact top-1
    assert hits[0].row == rows[400]
    assert index.search_text("message 401", tenant="acme", k=400)[0].row.tenant == "acme"


def test_missing_lance_stores_read_only_raise_not_found(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError):
        LanceVectorIndex(tmp_path / "nothing", read_only=True)
    lancedb.connect(tmp_path / "empty")  # a directory without the table
    (tmp_path / "empty").mkdir(exist_ok=True)
    with pytest.raises(StoreNotFoundError):
        LanceVectorIndex(tmp_path / "empty", read_only=True)


def test_a_table_with_another_schema_is_a_schema_error(tmp_path: Path) -> None:
    db = lancedb.connect(tmp_path / "lance")
    db.create_table(TABLE, schema=pa.schema([("memory_id", pa.string())]))
    with pytest.raises(StoreSchemaError, match="rebuild"):
        LanceVectorIndex(tmp_path / "lance")


def test_backend_write_errors_become_store_write_errors(tmp_path: Path) -> None:
    index = LanceVectorIndex(tmp_path / "lance")
    index.merge(rows_of(1), unit_vectors(1))
    with pytest.raises(StoreWriteError, match="retry the batch"), translated("delete", tmp_path):
        index._table.delete("no_such_column = 1")
