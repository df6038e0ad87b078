"""Forgetting in the DuckDB event index: content blanked and rows deleted, free blocks shredded.

Measured (docs/forget.md): ``DELETE`` + ``CHECKPOINT`` leaves a deleted row's strings in its
column segment (a delete only marks the row). ``UPDATE`` of a column makes the checkpoint write
that column's segment of the row group anew and free the old blocks. So :meth:`hide` first
blanks the content columns (text, payload, objects) of the rows it deletes, then deletes them,
in transactions that commit at once (the logical phase); :meth:`purge` checkpoints and
overwrites every free block (:meth:`DuckDBEventIndex.shred_free_blocks`). Nothing copies the
file: the cost is the touched row groups' content columns and the free space.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from memstack.operators.forget import Tombstones
from memstack.pipelines.forgetting.contract import (
    AuditProbe,
    ForgetReport,
    Residual,
    files_containing,
)
from memstack.pipelines.forgetting.duckdb_compact import compact_file
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex

log = logging.getLogger(__name__)

NAME = "duckdb"
_US = timedelta(microseconds=1)
_ROWS = (("records", "event_id"), ("fact_entries", "event_id"),
         ("fact_versions", "source_event_id"))
_BLANK = (("records", "event_id", "text = NULL, payload_json = ''"),
          ("fact_entries", "event_id", "object = NULL"),
          ("fact_versions", "source_event_id", "object = ''"))
"""Per table, the content columns blanked before a delete (NOT NULL ones to '')."""
MAX_AS_OF_TIMES = 16
"""As-of probes per audit, spread over the known times (the id checks cover every row)."""


def connection(index: DuckDBEventIndex) -> duckdb.DuckDBPyConnection:
    """The index's connection (the index exposes none yet; see docs/forget.md wiring)."""
    con: duckdb.DuckDBPyConnection = index._con  # no public handle yet
    return con


def query(index: DuckDBEventIndex, sql: str, params: Sequence[Any] = ()) -> pa.Table:
    """A read on the index's cursor for this thread (safe while the writer commits)."""
    return index.read(sql, params)


class DuckDBForgetStore:
    """:class:`~memstack.pipelines.forgetting.contract.Forgettable` over one DuckDB file.

    Opens its own index from ``path``, or works on ``index`` (the live worker's, left open).
    With its own index (the stores are not in use), a purge also rewrites the file whole
    (``compact``, default on then): see :mod:`~memstack.pipelines.forgetting.duckdb_compact`.
    """

    def __init__(self, path: Path, *, index: DuckDBEventIndex | None = None,
                 compact: bool | None = None) -> None:
        self.path = Path(path)
        self._owned = index is None
        self.index = index if index is not None else DuckDBEventIndex(self.path)
        self._compact = self._owned if compact is None else compact and self._owned
        self._probes: list[bytes] = []
        """The hidden rows' texts as bytes, until the next purge (held in memory only)."""

    @property
    def name(self) -> str:
        return NAME

    def forget(self, targets: Tombstones) -> ForgetReport:
        began = time.monotonic()
        report = self.hide(targets)
        physical = self.purge()
        physical["s"] = time.monotonic() - began
        return ForgetReport(NAME, report.deleted, physical)

    def hide(self, targets: Tombstones) -> ForgetReport:
        """The logical phase: content blanked, fact versions recomputed, rows deleted."""
        began = time.monotonic()
        ids = sorted(targets.event_ids)
        before = self.index.counts()
        self._probes += AuditProbe.of(targets).byte_probes
        self.index.note_content_blocks(ids)
        self._blank(ids)
        if targets.fact_mutations:
            self.index.apply(list(targets.fact_mutations), {}, topic="")
        with self.index.exclusive() as con:
            con.begin()
            try:
                for table, column in _ROWS:
                    con.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?))",
                                [ids])
                con.commit()
            except BaseException:
                con.rollback()
                raise
        after = self.index.counts()
        deleted = {t: before[t] - after[t] for t, _ in _ROWS}
        return ForgetReport(NAME, deleted, {"hide_s": time.monotonic() - began})

    def _blank(self, ids: list[str]) -> None:
        """Overwrite the content columns of the rows about to go (their segments are then
        rewritten by the next checkpoint instead of keeping the bytes under a delete mark)."""
        with self.index.exclusive() as con:
            con.begin()
            try:
                for table, column, sets in _BLANK:
                    con.execute(f"UPDATE {table} SET {sets} WHERE {column} IN "
                                "(SELECT unnest(?))", [ids])
                con.commit()
            except BaseException:
                con.rollback()
                raise

    def purge(self) -> dict[str, float]:
        """The physical phase: checkpoint, then shred every free block of the file."""
        began = time.monotonic()
        probes, self._probes = self._probes, []
        out = self.index.erase_noted(probes).figures()
        out["purge_s"] = time.monotonic() - began
        if self._compact:
            self.index.close()
            try:
                compact_file(self.path)
            finally:
                self.index = DuckDBEventIndex(self.path)
            out["compacted"], out["compact_s"] = 1.0, time.monotonic() - began - out["purge_s"]
        return out

    def residuals(self, probe: AuditProbe) -> list[Residual]:
        ids = sorted(probe.event_ids)
        out: list[Residual] = []
        rows = query(self.index, (
            "SELECT 'records' AS t, count(*) AS n FROM records WHERE event_id IN (SELECT unnest(?))"
            " UNION ALL SELECT 'fact_entries', count(*) FROM fact_entries WHERE event_id IN "
            "(SELECT unnest(?)) UNION ALL SELECT 'fact_versions', count(*) FROM fact_versions "
            "WHERE source_event_id IN (SELECT unnest(?)) OR closed_by_event_id IN (SELECT "
            "unnest(?))"), [ids, ids, ids, ids]).to_pylist()
        out += [Residual(NAME, "rows", int(r["n"]), str(r["t"])) for r in rows if r["n"]]
        out += self._text_residuals(probe)
        out += self._as_of_residuals(probe)
        files = [str(p) for p in (self.path, self.path.with_name(self.path.name + ".wal"))
                 if p.exists()]
        hits = files_containing(files, probe.byte_probes)
        out += [Residual(NAME, "file_bytes", n, path) for path, n in hits.items()]
        return out

    def _text_residuals(self, probe: AuditProbe) -> list[Residual]:
        if not probe.texts:
            return []
        texts = list(probe.texts)
        n = query(self.index, (
            "SELECT (SELECT count(*) FROM records WHERE text IN (SELECT unnest(?))) + "
            "(SELECT count(*) FROM fact_versions WHERE object IN (SELECT unnest(?))) AS n"),
            [texts, texts]).column("n")[0].as_py()
        return [Residual(NAME, "exact_text", int(n), "records.text / fact_versions.object")] \
            if n else []

    def _as_of_residuals(self, probe: AuditProbe) -> list[Residual]:
        """Records and fact versions answering as of every time the forgotten rows were known."""
        found = 0
        tenant = probe.request.tenant
        times = probe.known_times
        step = max(1, len(times) // MAX_AS_OF_TIMES)
        for tt in (*times[::step], *times[-1:]):
            found += sum(1 for r in self.index.records(tenant, until=tt + _US)
                         if r.event_id in probe.event_ids)
            found += sum(1 for v in self.index.facts_as_of(tenant, vt=tt, tt=tt)
                         if v.source_event_id in probe.event_ids)
        return [Residual(NAME, "as_of", found, f"{len(probe.known_times)} known times")] \
            if found else []

    def close(self) -> None:
        if self._owned:
            self.index.close()

