"""``DuckDBEventIndex``: records, fact entries, fact versions and applied offsets in DuckDB.

One writer per file (DuckDB locks it per process). Inside the writer process, reads run on
their own cursors (MVCC snapshots) while batches commit; other processes open a published
snapshot read-only (:mod:`memstack.pipelines.stores.duckdb_snapshot`). See docs/stores.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from memstack.foundation.log_coordinates import LogCut
from memstack.operators.log import LogPosition
from memstack.operators.mutations import (
    DeleteFactEntry,
    DeleteFactVersion,
    FactEntry,
    FactVersion,
    Mutation,
    PutFactEntry,
    PutFactVersion,
    PutRecord,
    RecordRow,
)
from memstack.operators.timeline import FactKey
from memstack.pipelines.stores import arrow, duckdb_asof
from memstack.pipelines.stores.base import ApplyResult
from memstack.pipelines.stores.duckdb_records import RecordsAsOf, records_sql
from memstack.pipelines.stores.duckdb_schema import check_tables, create_tables, q, translated
from memstack.pipelines.stores.errors import StoreNotFoundError, StoreReadOnlyError
from memstack.schemas.filters import Filter
from memstack.schemas.rows import EVENT_TABLES, OFFSETS, PRIMARY_KEYS

log = logging.getLogger(__name__)

APPLY = "apply"
"""The writer's batch commit (:meth:`DuckDBEventIndex.apply`), the one write whose effect
its listeners are told row by row."""
SNAPSHOT = "publish_snapshot"
"""A copy for readers (:mod:`memstack.pipelines.stores.duckdb_snapshot`): it changes no row,
so the listeners are not told."""

T = TypeVar("T")
ChangeListener = Callable[[Sequence[Mutation] | None], None]
"""Told after each write this index committed: the batch's mutations (:meth:`apply`), or
None after any other write (a forget's erase, a purge: anything may have changed)."""


class _Batch:
    """Mutations reduced to their final effect per key (the last mutation of a key wins).

    Records are immutable: the first record of an event id wins, as with the memory rows.
    """

    def __init__(self, mutations: Sequence[Mutation]) -> None:
        self.records: dict[str, RecordRow] = {}
        self.entries: dict[str, FactEntry | None] = {}
        self.versions: dict[str, FactVersion | None] = {}
        for m in mutations:
            if isinstance(m, PutRecord):
                self.records.setdefault(m.row.event_id, m.row)
            elif isinstance(m, PutFactEntry):
                self.entries[m.entry.event_id] = m.entry
            elif isinstance(m, DeleteFactEntry):
                self.entries[m.event_id] = None
            elif isinstance(m, PutFactVersion):
                self.versions[m.row.version_id] = m.row
            elif isinstance(m, DeleteFactVersion):
                self.versions[m.version_id] = None
            # PutMemory belongs to the vector index

    def puts(self) -> tuple[list[FactEntry], list[FactVersion]]:
        return ([e for e in self.entries.values() if e is not None],
                [v for v in self.versions.values() if v is not None])

    def deletes(self) -> tuple[list[str], list[str]]:
        return ([k for k, e in self.entries.items() if e is None],
                [k for k, v in self.versions.items() if v is None])


SAME_PROCESS_WAIT_S = 15.0
"""How long an open waits for another connection of this process to the same file, opened in
the other mode, to close (a replay's writer finishing on PyFlink's loopback worker threads)."""


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect``, waiting a little while this process still holds the file in the other
    mode: DuckDB refuses a second configuration of one database per process until the first
    connection closes, which a replay's writer does just after its job returns."""
    deadline = time.monotonic() + SAME_PROCESS_WAIT_S
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.ConnectionException as exc:
            if "different configuration" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class DuckDBEventIndex:
    """The relational index in one DuckDB file (``memstack.duckdb``)."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self._path = Path(path)
        self._read_only = read_only
        self._lock = threading.Lock()
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._listeners: list[ChangeListener] = []
        if read_only and not self._path.exists():
            raise StoreNotFoundError(f"no DuckDB index at {self._path}; run the pipeline first")
        self._path.parent.mkdir(parents=True, exist_ok=True)
        with translated("open", str(self._path)):
            self._con = _connect(self._path, read_only)
            self._con.execute("SET TimeZone = 'UTC'")
            if not read_only:
                create_tables(self._con)
            check_tables(self._con, str(self._path))
        log.info("opened DuckDB index %s (read_only=%s)", self._path, read_only)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The file's connection, for the forget store's erasure (deletes, ``CHECKPOINT``)
        under the stores' one-writer rule; reads go through :meth:`query`."""
        return self._con

    @property
    def path(self) -> Path:
        return self._path

    @property
    def read_only(self) -> bool:
        return self._read_only

    # -- writes --------------------------------------------------------------------------

    def apply(
        self, mutations: Sequence[Mutation], next_offsets: Mapping[int, int], *, topic: str
    ) -> ApplyResult:
        """Write rows and offsets in one transaction; offsets only ever move forward. Once
        committed, the listeners (:meth:`on_change`) are told the mutations."""
        with self.exclusive(APPLY) as con:
            with _committed(con):
                result = self.write(con, mutations, next_offsets, topic=topic)
            self._changed(mutations)  # under the lock: a snapshot copied under it agrees
        return result

    def on_change(self, listener: ChangeListener) -> None:
        """Call ``listener`` after each write committed through this index (in the writer's
        thread, before :meth:`apply` returns): with the batch's mutations, or None after any
        other transaction or exclusive use (a forget's erase, a purge), even a failed one.
        Key indexes kept beside the tables (``memstack.view.points``) follow the writes so.
        Listeners run under the index's lock, so whatever a snapshot copies under it
        (:func:`memstack.pipelines.stores.duckdb_snapshot.publish_snapshot`) the listeners have
        been told: keep them short."""
        self._listeners.append(listener)

    def _changed(self, mutations: Sequence[Mutation] | None) -> None:
        for listener in tuple(self._listeners):
            listener(mutations)

    def write(
        self, con: duckdb.DuckDBPyConnection, mutations: Sequence[Mutation],
        next_offsets: Mapping[int, int], *, topic: str,
    ) -> ApplyResult:
        """:meth:`apply`'s writes inside a :meth:`transaction` the caller holds (``con``)."""
        batch = _Batch(mutations)
        entries, versions = batch.puts()
        gone_entries, gone_versions = batch.deletes()
        offsets = pa.table({
            "topic": [topic] * len(next_offsets),
            "partition": list(next_offsets.keys()),
            "next_offset": list(next_offsets.values()),
        }, schema=OFFSETS)
        self._insert(con, "records", arrow.records_table(list(batch.records.values())),
                     "OR IGNORE")
        self._insert(con, "fact_entries", arrow.entries_table(entries), "OR REPLACE")
        self._insert(con, "fact_versions", arrow.versions_table(versions), "OR REPLACE")
        self._delete(con, "fact_entries", "event_id", gone_entries)
        self._delete(con, "fact_versions", "version_id", gone_versions)
        self._upsert_offsets(con, offsets)
        return ApplyResult(len(batch.records), len(entries), len(versions),
                           len(gone_entries) + len(gone_versions), dict(next_offsets))

    @contextmanager
    def exclusive(self, operation: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """The writer's connection under its lock, outside a transaction (``CHECKPOINT``);
        the listeners are told (None) afterwards, still under the lock, unless it is
        :meth:`apply`'s (which tells them its mutations) or a snapshot's."""
        self._writable(operation)
        with self._lock:
            try:
                with translated(operation, str(self._path)):
                    yield self._con
            finally:
                if operation not in (APPLY, SNAPSHOT):
                    self._changed(None)

    @contextmanager
    def transaction(self, operation: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """One write transaction on the writer's connection, under its lock: committed when the
        block returns, rolled back when it raises. The forget store erases through this, so
        that blanking, fact recomputation and deletes of one request commit together."""
        with self.exclusive(operation) as con, _committed(con):
            yield con

    @staticmethod
    def _insert(con: duckdb.DuckDBPyConnection, table: str, data: pa.Table, how: str) -> None:
        if data.num_rows == 0:
            return
        con.register("_batch", data)
        try:
            con.execute(f"INSERT {how} INTO {q(table)} SELECT * FROM _batch")
        finally:
            con.unregister("_batch")

    @staticmethod
    def _delete(con: duckdb.DuckDBPyConnection, table: str, key: str, ids: list[str]) -> None:
        if ids:
            con.execute(f"DELETE FROM {q(table)} WHERE {q(key)} IN (SELECT unnest(?))", [ids])

    @staticmethod
    def _upsert_offsets(con: duckdb.DuckDBPyConnection, offsets: pa.Table) -> None:
        if offsets.num_rows == 0:
            return
        con.register("_offsets", offsets)
        try:
            con.execute(
                'INSERT INTO offsets SELECT * FROM _offsets ON CONFLICT (topic, "partition") '
                "DO UPDATE SET next_offset = greatest(offsets.next_offset, excluded.next_offset)"
            )
        finally:
            con.unregister("_offsets")

    def close(self) -> None:
        with self._lock:
            for cur in self._cursors:
                cur.close()
            self._cursors.clear()
            self._con.close()

    def _writable(self, operation: str) -> None:
        if self._read_only:
            raise StoreReadOnlyError(
                f"{operation} on {self._path}: the index is opened read-only; open it with "
                "read_only=False in the one writer process"
            )

    # -- reads ---------------------------------------------------------------------------

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's read cursor: its own connection, each query an MVCC snapshot."""
        cur: duckdb.DuckDBPyConnection | None = getattr(self._local, "cursor", None)
        if cur is None:
            with self._lock:  # never duplicate the connection while a batch commits on it
                cur = self._con.cursor()
                self._cursors.append(cur)
            self._local.cursor = cur
        return cur

    def query(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """Read SQL over the event tables (``records``, ``fact_entries``, ``fact_versions``,
        ``offsets``) as an Arrow table, on this thread's cursor: the read side (view, catalog,
        recall, forget resolution and audit) asks its own questions through this."""
        with translated("query", str(self._path)):
            return self._cursor().sql(sql, params=list(params)).to_arrow_table()

    def applied_offsets(self, topic: str) -> dict[int, int]:
        table = self.query(
            'SELECT "partition", next_offset FROM offsets WHERE topic = ?', [topic])
        return dict(zip(table.column("partition").to_pylist(),
                        table.column("next_offset").to_pylist(), strict=True))

    def record(self, event_id: str) -> RecordRow | None:
        rows = arrow.to_records(self.query("SELECT * FROM records WHERE event_id = ?", [event_id]))
        return rows[0] if rows else None

    def records(self, tenant: str, *, session: str | None = None, since: datetime | None = None,
                until: datetime | None = None, limit: int | None = None,
                filter: Filter | None = None, as_of: RecordsAsOf | None = None,
                start: datetime | None = None, end: datetime | None = None) -> list[RecordRow]:
        return arrow.to_records(self.records_table(
            tenant, session=session, since=since, until=until, limit=limit, filter=filter,
            as_of=as_of, start=start, end=end))

    def records_table(
        self, tenant: str, *, session: str | None = None, since: datetime | None = None,
        until: datetime | None = None, limit: int | None = None, columns: str = "*",
        filter: Filter | None = None, as_of: RecordsAsOf | None = None,
        start: datetime | None = None, end: datetime | None = None,
    ) -> pa.Table:
        """:meth:`records` as a table (``columns``: a select list), without row objects
        (:func:`~memstack.pipelines.stores.duckdb_records.records_sql`)."""
        return self.query(*records_sql(tenant, session=session, since=since, until=until,
                                       limit=limit, columns=columns, filter=filter,
                                       as_of=as_of, start=start, end=end))

    def fact_entries(self, keys: Iterable[FactKey]) -> dict[FactKey, list[FactEntry]]:
        wanted = sorted(set(keys))
        out: dict[FactKey, list[FactEntry]] = {k: [] for k in wanted}
        if not wanted:
            return out
        table = self.query(
            "SELECT e.* FROM fact_entries e JOIN (SELECT unnest(?) AS tenant, unnest(?) AS "
            "subject, unnest(?) AS relation) k USING (tenant, subject, relation) "
            'ORDER BY e.tt, e.tt_partition, e.tt_offset, e.event_id',
            [[k.tenant for k in wanted], [k.subject for k in wanted],
             [k.relation for k in wanted]],
        )
        for entry in arrow.to_entries(table):
            out[FactKey.of(entry)].append(entry)
        return out

    def facts_as_of(self, tenant: str, *, subject: str | None = None,
                    relation: str | None = None, valid: datetime | None = None,
                    known: datetime | LogPosition | LogCut | None = None) -> list[FactVersion]:
        return arrow.to_versions(self.facts_as_of_table(
            tenant, subject=subject, relation=relation, valid=valid, known=known))

    def facts_as_of_table(
        self, tenant: str, *, subject: str | None = None, relation: str | None = None,
        valid: datetime | None = None, known: datetime | LogPosition | LogCut | None = None,
    ) -> pa.Table:
        """:meth:`facts_as_of` as a table, without version objects."""
        return duckdb_asof.facts_table(self.query, tenant, subject=subject, relation=relation,
                                       valid=valid, known=known)

    def facts_as_of_subjects(
        self, tenant: str, subjects: Sequence[str], *, valid: datetime | None = None,
        known: datetime | None = None,
    ) -> list[FactVersion]:
        """:meth:`facts_as_of` for many subjects in one query (every relation)."""
        return duckdb_asof.facts_of_subjects(self.query, tenant, subjects, valid=valid,
                                             known=known)

    def fact_history(
        self, tenant: str, subject: str, relation: str | None = None, *,
        known: datetime | LogPosition | LogCut | None = None,
    ) -> list[FactVersion]:
        return duckdb_asof.history(self.query, tenant, subject, relation, known=known)

    def counts(self) -> dict[str, int]:
        return {t: int(self.query(f"SELECT count(*) AS n FROM {q(t)}").column(0)[0].as_py())
                for t in EVENT_TABLES}

    def table(self, name: str) -> pa.Table:
        """Every row of one of :data:`EVENT_TABLES` (for comparisons across deployments)."""
        if name not in EVENT_TABLES:
            raise ValueError(f"no table {name!r}; one of {sorted(EVENT_TABLES)}")
        return self.query(f"SELECT * FROM {q(name)}")

    def content_hashes(self) -> dict[str, str]:
        """Per table, a hash of its content (see :func:`arrow.table_hash`)."""
        return {t: arrow.table_hash(self.query(f"SELECT * FROM {q(t)}"), PRIMARY_KEYS[t])
                for t in EVENT_TABLES}

    def content_hash(self) -> str:
        hashes = self.content_hashes()
        return arrow.combine(hashes)


@contextmanager
def _committed(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One transaction on ``con``: committed when the block returns, rolled back when it
    raises."""
    con.begin()
    try:
        yield
        con.commit()
    except BaseException:
        with suppress(duckdb.Error):  # a failed commit has ended the transaction
            con.rollback()
        raise
