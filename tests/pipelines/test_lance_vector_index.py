"""LanceVectorIndex: the VectorIndex contract, plus index maintenance and error translation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lancedb
import pyarrow as pa
import pytest
from lancedb.index import BTree

from memstack.operators.mutations import MemoryRow
from memstack.pipelines.stores.base import VectorIndex
from memstack.pipelines.stores.errors import StoreNotFoundError, StoreSchemaError, StoreWriteError
from memstack.pipelines.stores.lance_index import (
    CANDIDATE_COLUMNS,
    TABLE,
    TEXT_INDEX,
    VECTOR_INDEX,
    IndexPolicy,
    LanceVectorIndex,
    translated,
)
from tests.pipelines.helpers import builder, logged, memories, mutations, unit_vectors
from tests.pipelines.vector_index_contract import VectorIndexContract, rows_of


class TestLanceVectorIndex(VectorIndexContract):
    @pytest.fixture
    def vectors(self, tmp_path: Path) -> Iterator[LanceVectorIndex]:
        self._dir = tmp_path / "lance"
        yield LanceVectorIndex(self._dir)

    def reader(self, index: VectorIndex) -> VectorIndex:
        return LanceVectorIndex(self._dir, read_only=True)


def test_indexes_are_built_as_the_table_grows(tmp_path: Path) -> None:
    policy = IndexPolicy(vector_min_rows=300, refresh_rows=100, num_sub_vectors=8)
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


def flamingo_rows(acme: int, other: int) -> list[MemoryRow]:
    """Notes that all match "flamingo", shorter (higher BM25) the earlier they come."""
    events = [logged(builder(t).note("s1", "flamingo " + " ".join(["word"] * (i % 9))), n)
              for n, (t, i) in enumerate([("acme", i) for i in range(acme)]
                                         + [("other", i) for i in range(other)])]
    return memories(mutations(events))


def test_full_text_candidates_rank_all_tenants_then_keep_the_tenants(tmp_path: Path) -> None:
    index = LanceVectorIndex(tmp_path / "lance", policy=IndexPolicy(text_overfetch_cost=0))
    rows = flamingo_rows(60, 40)
    index.merge(rows, unit_vectors(len(rows)))
    prefiltered = LanceVectorIndex(tmp_path / "lance", read_only=True,
                                   policy=IndexPolicy(text_overfetch_max=0))
    assert index._text.overfetch("acme", 5) == 11  # 1.3 * 5 / 0.6: ranks 11 rows of all tenants
    ranked = index._text.bm25("flamingo", "tenant = 'acme'", 11, ["tenant"], prefilter=False)
    assert ranked.num_rows >= 5
    got = index.text_candidates("flamingo", tenant="acme", k=5)
    want = prefiltered.text_candidates("flamingo", tenant="acme", k=5)
    assert set(got.column_names) == {*CANDIDATE_COLUMNS, "_rowid", "score"}
    assert set(got.column("tenant").to_pylist()) == {"acme"} and got.num_rows == 5
    assert got.column("score").to_pylist() == want.column("score").to_pylist()
    assert index.search_text("flamingo", tenant="acme", k=5)[0].row.tenant == "acme"


def test_full_text_candidates_that_rank_too_few_of_the_tenant_fall_back_to_the_prefilter(
        tmp_path: Path) -> None:
    index = LanceVectorIndex(tmp_path / "lance", policy=IndexPolicy(text_overfetch_cost=0))
    rows = flamingo_rows(0, 40) + rows_of(60) + flamingo_rows(2, 0)  # acme: 62 rows, 2 match
    index.merge(rows, unit_vectors(len(rows)))
    assert index._text.overfetch("acme", 5) == 11 and index._text.matches("flamingo", 11) == 11
    found = index.text_candidates("flamingo", tenant="acme", k=5)  # ranked 11: too few acme
    assert found.num_rows == 2 and set(found.column("tenant").to_pylist()) == {"acme"}
    assert index._text.overfetch("acme", 40) == 86 and index._text.matches("flamingo", 86) == 42
    every = index.text_candidates("flamingo", tenant="acme", k=40)  # every match was ranked
    assert every.column("memory_id").to_pylist() == found.column("memory_id").to_pylist()
    assert index.text_candidates("nothing", tenant="acme", k=5).num_rows == 0


def test_small_tenants_are_prefiltered(tmp_path: Path) -> None:
    index = LanceVectorIndex(tmp_path / "lance")  # ranking 11 rows costs more than 60 filtered
    index.merge(rows_of(60) + rows_of(40, tenant="other"), unit_vectors(100))
    assert index._text.overfetch("acme", 5) is None and index._text.overfetch("nobody", 5) is None


def test_an_older_btree_tenant_index_is_rebuilt_as_a_bitmap(tmp_path: Path) -> None:
    index = LanceVectorIndex(tmp_path / "lance")
    index.merge(rows_of(5), unit_vectors(5))
    index._table.create_index("tenant", config=BTree(), name="tenant_idx", replace=True)
    assert "tenant_idx" in index.maintain().built
    kinds = {i.name: i.index_type for i in index._table.list_indices()}
    assert kinds["tenant_idx"] == "Bitmap" and kinds["memory_id_idx"] == "BTree"


def test_rows_are_read_by_the_row_ids_a_search_returned(tmp_path: Path) -> None:
    index = LanceVectorIndex(tmp_path / "lance")
    rows, vecs = rows_of(5), unit_vectors(5)
    index.merge(rows, vecs)
    found = index.vector_candidates(vecs[3], tenant="acme", k=5)
    ids, at = found.column("memory_id").to_pylist(), found.column("_rowid").to_pylist()
    assert ids[0] == rows[3].memory_id
    by_id = {r.memory_id: r for r in rows}
    assert index.rows_at(at, ids) == [by_id[m] for m in ids]
    assert index.rows_at([at[1], at[0]], ids[:2]) == [by_id[m] for m in ids[:2]]  # moved: by id
    assert index.rows_at([1 << 40], ids[:1]) == [by_id[ids[0]]]  # no such row id: by id
    index.delete([ids[0]])
    assert index.rows_at(at[:1], ids[:1]) == []  # deleted since the search
