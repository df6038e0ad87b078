"""DuckDBEventIndex: the EventIndex contract, plus snapshots and error translation."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from memstack.pipelines.stores.base import EventIndex
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.duckdb_schema import by_subject
from memstack.pipelines.stores.duckdb_snapshot import publish_snapshot
from memstack.pipelines.stores.errors import (
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreSchemaError,
)
from tests.pipelines.event_index_contract import EventIndexContract
from tests.pipelines.helpers import TOPIC, builder, conversation, logged, mutations, year


class TestDuckDBEventIndex(EventIndexContract):
    @pytest.fixture
    def index(self, tmp_path: Path) -> Iterator[DuckDBEventIndex]:
        self._path = tmp_path / "memstack.duckdb"
        ix = DuckDBEventIndex(self._path)
        self._open = [ix]
        yield ix
        for opened in self._open:
            opened.close()

    def reopen(self, index: EventIndex) -> EventIndex:
        index.close()
        again = DuckDBEventIndex(self._path)
        self._open.append(again)
        return again


def test_a_published_snapshot_is_readable_read_only_while_the_writer_goes_on(
    tmp_path: Path,
) -> None:
    writer = DuckDBEventIndex(tmp_path / "live.duckdb")
    b = builder()
    writer.apply(mutations(conversation(b, "s1", 3)), {0: 3}, topic=TOPIC)
    snap = tmp_path / "snap" / "memstack.duckdb"
    publish_snapshot(writer, snap)
    writer.apply(mutations(conversation(b, "s1", 2, start=3)), {0: 5}, topic=TOPIC)
    reader = DuckDBEventIndex(snap, read_only=True)
    try:
        assert reader.counts()["records"] == 3
        assert reader.applied_offsets(TOPIC) == {0: 3}
        with pytest.raises(StoreReadOnlyError):
            reader.apply([], {0: 9}, topic=TOPIC)
        publish_snapshot(writer, snap)  # replaces the file atomically; open readers keep theirs
        assert reader.counts()["records"] == 3
        reader.close()  # DuckDB shares one instance per path in a process: close, then reopen
        reader = DuckDBEventIndex(snap, read_only=True)
        assert reader.counts()["records"] == 5
    finally:
        reader.close()
        writer.close()


def test_a_snapshot_capture_sees_every_batch_the_copy_holds_told_to_the_listeners(
    tmp_path: Path,
) -> None:
    """Listeners run under the lock the copy takes: what ``capture`` reads of them (the
    subjects a batch changed) covers every batch in the copy, and the copy drops nothing."""
    writer = DuckDBEventIndex(tmp_path / "live.duckdb")
    told: list[int | None] = []
    writer.on_change(lambda m: told.append(None if m is None else len(m)))
    b = builder()
    try:
        writer.apply(mutations(conversation(b, "s1", 3)), {0: 3}, topic=TOPIC)
        seen = publish_snapshot(writer, tmp_path / "snap.duckdb", lambda: list(told))
        assert seen == told and len(told) == 1 and told[0]  # told before the copy, not after
        reader = DuckDBEventIndex(tmp_path / "snap.duckdb", read_only=True)
        assert reader.applied_offsets(TOPIC) == {0: 3}
        reader.close()
        assert None not in told  # a snapshot is not a write: held key indexes stay
    finally:
        writer.close()


def test_a_second_writer_process_gets_a_store_locked_error(tmp_path: Path) -> None:
    path = tmp_path / "memstack.duckdb"
    DuckDBEventIndex(path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import duckdb, sys, time
            con = duckdb.connect({str(path)!r})
            print("locked", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLockedError, match="one writer"):
            DuckDBEventIndex(path)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_opening_missing_stores_read_only_says_to_run_the_pipeline(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match="run the pipeline"):
        DuckDBEventIndex(tmp_path / "nothing.duckdb", read_only=True)


def test_a_table_with_other_columns_is_a_schema_error(tmp_path: Path) -> None:
    path = tmp_path / "memstack.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE records (event_id VARCHAR PRIMARY KEY, tenant VARCHAR)")
    con.close()
    with pytest.raises(StoreSchemaError, match="rebuild"):
        DuckDBEventIndex(path)


def test_readers_on_other_threads_see_whole_batches_while_batches_commit(
    tmp_path: Path,
) -> None:
    index = DuckDBEventIndex(tmp_path / "memstack.duckdb")
    b = builder()
    batches = [mutations(conversation(b, f"s{i}", 40, start=40 * i)) for i in range(12)]
    seen: list[int] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(index.counts()["records"])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i, muts in enumerate(batches):
            index.apply(muts, {0: 40 * (i + 1)}, topic=TOPIC)
    finally:
        done.set()
        reader.join(timeout=30)
        index.close()
    assert seen and all(n % 40 == 0 for n in seen)


def test_facts_by_subject_use_the_subject_index_and_stay_in_their_tenant(
    tmp_path: Path,
) -> None:
    index = DuckDBEventIndex(tmp_path / "memstack.duckdb")
    try:
        acme, other = builder("acme"), builder("other")
        events = [logged(b.fact("s", "ana", "lives_in", city, valid_from=year(2020)), n)
                  for n, (b, city) in enumerate(((acme, "Lisbon"), (other, "Oslo")), start=1)]
        events += [logged(acme.fact("s", f"u{n}", "lives_in", "Rome", valid_from=year(2020)),
                          n + 3) for n in range(50)]
        index.apply(mutations(events), {0: 60}, topic=TOPIC)
        for tenant, city in (("acme", "Lisbon"), ("other", "Oslo")):
            assert [v.object for v in index.facts_as_of(tenant, subject="ana")] == [city]
            assert [v.object for v in index.fact_history(tenant, "ana", "lives_in")] == [city]
        sql = by_subject("fact_versions", "*") + "SELECT * FROM k WHERE tenant = ?"
        plan = index.query("EXPLAIN ANALYZE " + sql, ["ana", "acme"]).to_pylist()
        assert "Index Scan" in "\n".join(str(row) for row in plan)
    finally:
        index.close()
