"""Metadata is forgotten with its rows: the DuckDB erase blanks it with the text and the purge
leaves none of its bytes in the file; the LanceDB erase and purge leave no row and no data
file (of any version) holding the forgotten rows, so no filter on their metadata finds them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from memstack.jobs.bench.forget.worker import event_id
from memstack.operators.forget import Tombstones
from memstack.operators.mutations import MemoryRow, PutRecord, RecordRow
from memstack.pipelines.forgetting.contract import files_containing
from memstack.pipelines.forgetting.duckdb_store import DuckDBForgetStore
from memstack.pipelines.forgetting.lance_store import LanceForgetStore
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.lance_files import data_files_with
from memstack.schemas.filter_sql import to_lance
from memstack.schemas.filters import parse_filter
from tests.forget.givens import request

ROWS = 3000
GONE = [7, 1500, ROWS - 3]
T0 = datetime(2025, 1, 1, tzinfo=UTC)
DIM = 8


def secret(i: int) -> str:
    return f"diagnosis-{i * 7919 % 100000:05d}-{i:06d}"


def metadata(i: int) -> dict[str, object]:
    return {"patient": secret(i), "ward": i % 7}


def record(i: int) -> RecordRow:
    at = T0 + timedelta(seconds=i)
    return RecordRow(event_id(i), "acme", "bench", f"s{i % 10}", None, "note", at, at, None, at,
                     0, i, json.dumps({"text": f"visit {i}"}), f"visit {i}", "bench", "agent",
                     metadata(i))


def targets() -> Tombstones:
    return Tombstones(request({"type": "tenant"}), frozenset(event_id(i) for i in GONE))


def test_duckdb_erase_and_purge_leave_no_metadata_byte(tmp_path: Path) -> None:
    index = DuckDBEventIndex(tmp_path / "m.duckdb")
    index.connection.execute("SET force_compression = 'uncompressed'")  # bytes visible
    index.apply([PutRecord(record(i)) for i in range(ROWS)], {0: ROWS}, topic="t")
    index.connection.execute("CHECKPOINT")
    probes = [secret(i).encode() for i in GONE]
    files = [str(index.path)]
    assert sum(files_containing(files, probes).values()) == len(GONE)  # the control
    store = DuckDBForgetStore.over(index)
    assert store.erase(targets())["records"] == len(GONE)
    assert store.purge(probes)["clean"] == 1.0
    assert sum(files_containing(files, probes).values()) == 0
    kept = index.records("acme", filter=parse_filter({"ward": {"gte": 0}}))
    assert len(kept) == ROWS - len(GONE)
    assert all(r.metadata == metadata(r.offset) for r in kept)


def test_lance_erase_and_purge_leave_no_row_in_any_data_file(tmp_path: Path) -> None:
    store = LanceForgetStore(tmp_path / "lance", dim=DIM)
    rows = [MemoryRow(event_id(i), event_id(i), "acme", f"s{i % 10}", None, "note",
                      f"visit {i}", T0, None, T0 + timedelta(seconds=i), None, 0, i,
                      metadata(i)) for i in range(ROWS)]
    vectors = np.random.default_rng(3).random((ROWS, DIM), dtype=np.float32)
    for lo in range(0, ROWS, 1000):
        store.index.merge(rows[lo:lo + 1000], vectors[lo:lo + 1000], maintain=False)
    store.index.maintain(force=True)
    ids = [event_id(i) for i in GONE]
    gone = parse_filter({"patient": {"in": [secret(i) for i in GONE]}})
    where = f"tenant = 'acme' AND {to_lance(gone)}"
    assert store.index.scan(where, ["memory_id"]).num_rows == len(GONE)  # the control
    assert store.erase(targets()) == {"memories": len(GONE)}
    store.purge()
    assert store.index.scan(where, ["memory_id"]).num_rows == 0
    assert data_files_with(str(store.directory), "event_id", ids) == {}
    kept = store.index.get([event_id(i) for i in (0, 8, ROWS - 1)])
    assert [r.metadata for r in kept] == [metadata(i) for i in (0, 8, ROWS - 1)]
