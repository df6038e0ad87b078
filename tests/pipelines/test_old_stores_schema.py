"""A stores directory written before a column was added (``metadata_json``) is refused with a
message that says to rebuild it from the log, not a crash deep in a write or a read."""

from __future__ import annotations

from pathlib import Path

import duckdb
import lancedb
import pytest

from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.duckdb_schema import ddl
from memstack.pipelines.stores.errors import StoreSchemaError
from memstack.pipelines.stores.lance_index import TABLE, LanceVectorIndex
from memstack.schemas.rows import EVENT_TABLES, memories_schema


def test_an_old_duckdb_file_says_rebuild_by_replay(tmp_path: Path) -> None:
    path = tmp_path / "memstack.duckdb"
    con = duckdb.connect(str(path))
    for table, schema in EVENT_TABLES.items():
        if "metadata_json" in schema.names:
            schema = schema.remove(schema.get_field_index("metadata_json"))
        con.execute(ddl(table, schema))
    con.close()
    with pytest.raises(StoreSchemaError, match=r"(?s)table .records.*memstack replay"):
        DuckDBEventIndex(path)


def test_an_old_lance_table_says_rebuild_by_replay(tmp_path: Path) -> None:
    old = memories_schema(8)
    old = old.remove(old.get_field_index("metadata_json"))
    lancedb.connect(tmp_path).create_table(TABLE, schema=old)
    with pytest.raises(StoreSchemaError, match=r"(?s)metadata_json.*memstack replay"):
        LanceVectorIndex(tmp_path, dim=8)
