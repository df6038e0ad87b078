"""The DuckDB purge on real files: erase blanks and deletes, purge checkpoints and fills the free
blocks, has the segments that share a block with the old content rewritten, and falls back to
rewriting the tables when a block that held the content stays shared.

Strings are stored uncompressed here (``force_compression``) so that the byte scan can see them:
with DuckDB's default DICT_FSST compression the texts are not in the file as plain bytes at all
(the control below would find nothing, and prove nothing).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memstack.jobs.bench.forget.worker import event_id
from memstack.operators.forget import Tombstones
from memstack.operators.mutations import PutRecord, RecordRow
from memstack.pipelines.forgetting.contract import files_containing
from memstack.pipelines.forgetting.duckdb_store import DuckDBForgetStore
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from tests.forget.givens import request

ROWS = 6000
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def text(i: int) -> str:
    return f"row {i:06d} says the locker code is {i * 7919 % 100000:05d} at gym {i % 13}"


def record(i: int) -> RecordRow:
    at = T0 + timedelta(seconds=i)
    return RecordRow(event_id(i), "acme", "bench", f"s{i % 10}", None, "message", at, at,
                     None, at, 0, i, json.dumps({"role": "user", "text": text(i)}), text(i),
                     "bench", "agent")


def index_of(path: Path, rows: range = range(ROWS)) -> DuckDBEventIndex:
    index = DuckDBEventIndex(path)
    index.connection.execute("SET force_compression = 'uncompressed'")
    index.apply([PutRecord(record(i)) for i in rows], {0: rows.stop}, topic="t")
    index.connection.execute("CHECKPOINT")
    return index


def targets(rows: list[int]) -> Tombstones:
    return Tombstones(request({"type": "tenant"}), frozenset(event_id(i) for i in rows),
                      texts=tuple(text(i) for i in rows))


def probes(rows: list[int]) -> list[bytes]:
    return [text(i).encode() for i in rows]


def in_file(index: DuckDBEventIndex, rows: list[int]) -> int:
    files = [str(p) for p in (index.path, index.path.with_name(index.path.name + ".wal"))
             if p.exists()]
    return sum(files_containing(files, probes(rows)).values())


def survivors_intact(index: DuckDBEventIndex, gone: list[int]) -> bool:
    got = {r["event_id"]: r["text"]
           for r in index.query("SELECT event_id, text FROM records").to_pylist()}
    want = {event_id(i): text(i) for i in range(ROWS) if i not in gone}
    return got == want


GONE = [3, 2500, ROWS - 2]


def test_control_delete_and_checkpoint_leave_the_bytes(tmp_path: Path) -> None:
    index = index_of(tmp_path / "m.duckdb")
    index.connection.execute("DELETE FROM records WHERE event_id IN (SELECT unnest(?))",
                             [[event_id(i) for i in GONE]])
    index.connection.execute("CHECKPOINT")
    assert in_file(index, GONE) == len(GONE)


def test_erase_and_purge_leave_no_byte_and_every_other_row(tmp_path: Path) -> None:
    index = index_of(tmp_path / "m.duckdb")
    store = DuckDBForgetStore.over(index)
    assert store.erase(targets(GONE))["records"] == len(GONE)
    assert index.query("SELECT count(*) AS n FROM records WHERE event_id IN (SELECT unnest(?))",
                       [[event_id(i) for i in GONE]]).column("n")[0].as_py() == 0
    figures = store.purge(probes(GONE))
    assert figures["clean"] == 1.0 and figures["noted_blocks"] > 0
    assert in_file(index, GONE) == 0
    assert survivors_intact(index, GONE)


def test_purge_without_probes_after_a_restart(tmp_path: Path) -> None:
    index = index_of(tmp_path / "m.duckdb")
    DuckDBForgetStore.over(index).erase(targets(GONE))
    index.close()  # the process stops between erase and purge
    reopened = DuckDBEventIndex(tmp_path / "m.duckdb")
    reopened.connection.execute("SET force_compression = 'uncompressed'")
    figures = DuckDBForgetStore.over(reopened).purge([])
    assert figures["noted_blocks"] > 0 and figures["clean"] == 1.0
    assert in_file(reopened, GONE) == 0
    assert survivors_intact(reopened, GONE)


def test_several_requests_purged_in_one_call(tmp_path: Path) -> None:
    index = index_of(tmp_path / "m.duckdb")
    store = DuckDBForgetStore.over(index)
    for rows in ([3], [2500, 2501], [ROWS - 2]):
        store.erase(targets(rows))
    figures = store.purge(probes([3, 2500, 2501, ROWS - 2]))
    assert figures["clean"] == 1.0
    assert in_file(index, [3, 2500, 2501, ROWS - 2]) == 0
    assert survivors_intact(index, [3, 2500, 2501, ROWS - 2])


def test_a_shared_block_is_released_without_rewriting_the_table(tmp_path: Path) -> None:
    """DuckDB packs the last pieces of a row group's columns into one block: after the
    checkpoint, the old text segment's block is still used by other columns. The purge has
    those columns rewritten (row group by row group) instead of the whole table."""
    index = index_of(tmp_path / "m.duckdb")
    bounded = DuckDBForgetStore.over(index, compact_fallback=False)
    bounded.erase(targets(GONE))
    figures = bounded.purge(probes(GONE))
    assert figures["shared_blocks"] > 0 and figures["released_segments"] > 0
    assert figures["shared_left"] == 0.0 and figures["compacted"] == 0.0
    assert figures["clean"] == 1.0
    assert in_file(index, GONE) == 0
    assert survivors_intact(index, GONE)


def test_a_shared_block_left_makes_the_fallback_rewrite(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from memstack.pipelines.forgetting import duckdb_shred

    monkeypatch.setattr(duckdb_shred, "RELEASE_ROUNDS", 0)  # as when a key column shares it
    index = index_of(tmp_path / "m.duckdb")
    bounded = DuckDBForgetStore.over(index, compact_fallback=False)
    bounded.erase(targets(GONE))
    figures = bounded.purge(probes(GONE))
    assert figures["shared_left"] > 0 and figures["compacted"] == 0.0
    assert figures["clean"] == 0.0  # the bounded path does not vouch for a shared block
    more = [10, 11]
    with_fallback = DuckDBForgetStore.over(index)
    with_fallback.erase(targets(more))
    figures = with_fallback.purge(probes(GONE + more))
    assert figures["compacted"] == 1.0 and figures["clean"] == 1.0
    assert in_file(index, GONE + more) == 0
    assert survivors_intact(index, GONE + more)


def test_over_keeps_the_writers_index_open(tmp_path: Path) -> None:
    index = index_of(tmp_path / "m.duckdb")
    store = DuckDBForgetStore.over(index)
    store.forget(targets(GONE))
    index.apply([PutRecord(record(ROWS))], {0: ROWS + 1}, topic="t")
    assert index.record(event_id(ROWS)) == record(ROWS)
    assert index.applied_offsets("t") == {0: ROWS + 1}
