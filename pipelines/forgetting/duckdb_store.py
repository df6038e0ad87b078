"""Forgetting in the DuckDB event index: rows deleted, file checkpointed, then compacted.

Measured (docs/forget.md): ``DELETE`` + ``CHECKPOINT`` leaves the deleted strings in the
file's blocks, so every forget also rewrites the database into a fresh file
(``COPY FROM DATABASE``) and swaps it in atomically. The compaction needs the file to itself:
this adapter owns the :class:`DuckDBEventIndex` it opened and reopens it afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from datetime import timedelta
from pathlib import Path

import duckdb

from memstack.foundation.durable import fsync_dir
from memstack.operators.forget import Tombstones
from memstack.pipelines.forgetting.contract import (
    AuditProbe,
    ForgetReport,
    Residual,
    files_containing,
)
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex

log = logging.getLogger(__name__)

NAME = "duckdb"
_US = timedelta(microseconds=1)
MAX_AS_OF_TIMES = 16
"""As-of probes per audit, spread over the known times (the id checks cover every row)."""


class DuckDBForgetStore:
    """:class:`~memstack.pipelines.forgetting.contract.Forgettable` over one DuckDB file."""

    def __init__(self, path: Path, *, compact: bool = True) -> None:
        self.path = Path(path)
        self.index = DuckDBEventIndex(self.path)
        self._compact = compact

    @property
    def name(self) -> str:
        return NAME

    def forget(self, targets: Tombstones) -> ForgetReport:
        began = time.monotonic()
        deleted = self.erase(targets)
        physical = self.purge(AuditProbe.of(targets).byte_probes)
        physical["s"] = time.monotonic() - began
        return ForgetReport(NAME, deleted, physical)

    def erase(self, targets: Tombstones) -> dict[str, int]:
        """Fact versions recomputed and entries dropped, then records by event id."""
        ids = sorted(targets.event_ids)
        before = self.index.counts()
        if targets.fact_mutations:
            self.index.apply(list(targets.fact_mutations), {}, topic="")
        con = self.index.connection
        con.begin()
        try:
            for table, column in (("records", "event_id"), ("fact_entries", "event_id"),
                                  ("fact_versions", "source_event_id")):
                con.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?))", [ids])
            con.commit()
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # a failed commit has ended the transaction
                con.rollback()
            raise
        after = self.index.counts()
        return {t: before[t] - after[t] for t in ("records", "fact_entries", "fact_versions")}

    def purge(self, probes: list[bytes]) -> dict[str, float]:
        """CHECKPOINT; scan the file for the probes; compact into a fresh file."""
        self.index.connection.execute("CHECKPOINT")
        clean = not files_containing([str(self.path)], probes)
        out = {"checkpoint_clean": float(clean), "compacted": 0.0}
        if self._compact:
            t = time.monotonic()
            self.compact()
            out["compacted"], out["compact_s"] = 1.0, time.monotonic() - t
        return out

    def compact(self) -> None:
        """Rewrite the live rows into a fresh file and swap it in (free blocks are not kept)."""
        self.index.close()
        fresh = self.path.with_name(f".{self.path.name}.{os.getpid()}.compact")
        fresh.unlink(missing_ok=True)
        try:
            con = duckdb.connect(str(fresh))
            try:
                con.execute(f"ATTACH '{self.path}' AS old (READ_ONLY)")
                name = con.execute("SELECT current_database()").fetchone()
                con.execute(f'COPY FROM DATABASE old TO "{name[0] if name else "main"}"')
                con.execute("DETACH old")
                con.execute("CHECKPOINT")
            finally:
                con.close()
            os.replace(fresh, self.path)
            fsync_dir(self.path.parent)
        finally:
            fresh.unlink(missing_ok=True)
            self.index = DuckDBEventIndex(self.path)

    def residuals(self, probe: AuditProbe) -> list[Residual]:
        ids = sorted(probe.event_ids)
        out: list[Residual] = []
        rows = self.index.query((
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
        n = self.index.query((
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
            found += sum(1 for v in self.index.facts_as_of(tenant, valid=tt, known=tt)
                         if v.source_event_id in probe.event_ids)
        return [Residual(NAME, "as_of", found, f"{len(probe.known_times)} known times")] \
            if found else []

    def close(self) -> None:
        self.index.close()

