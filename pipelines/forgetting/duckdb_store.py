"""Forgetting in the DuckDB event index, in time bounded by what is forgotten.

``erase`` overwrites the forgotten rows' content, recomputes fact versions and deletes the rows,
in one transaction; ``purge`` checkpoints (only the touched row groups' content columns are
rewritten), has the segments that still share a block with the old content rewritten too, row
group by row group, and overwrites the free blocks with filler (:mod:`.duckdb_shred`). When a
block that held the content is still in use afterwards (shared with a key column's segment), or
the file still holds a probe, the touched tables are rewritten in place (the fallback, linear in
them). Neither
path closes the database, so the store can run over the live writer's index
(:meth:`DuckDBForgetStore.over`). Measured in docs/forget.md.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from memstack.foundation.durable import fsync_dir
from memstack.operators.forget import Tombstones
from memstack.pipelines.forgetting import duckdb_shred as shred
from memstack.pipelines.forgetting.contract import (
    AuditProbe,
    ForgetReport,
    Residual,
    erased_then_purged,
    files_containing,
)
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.schemas.rows import EVENT_TABLES

log = logging.getLogger(__name__)

NAME = "duckdb"
_US = timedelta(microseconds=1)
MAX_AS_OF_TIMES = 16
"""As-of probes per audit, spread over the known times (the id checks cover every row)."""
_DELETES = (("records", "event_id"), ("fact_entries", "event_id"),
            ("fact_versions", "source_event_id"))


def _count_in(column: pa.ChunkedArray, ids: pa.Array) -> int:
    return int(pc.sum(pc.is_in(column, value_set=ids)).as_py() or 0)


def _clean(figures: dict[str, float]) -> bool:
    """Whether the purge can vouch for the file: no probe found, no free block left unfilled,
    and no block that held the content still in use unless the tables were rewritten."""
    shared_ok = not figures["shared_left"] or figures["compacted"] == 1.0
    return shared_ok and not figures["probe_hits"] and not figures["unfilled_blocks"]


class DuckDBForgetStore:
    """:class:`~memstack.pipelines.forgetting.contract.Forgettable` over one DuckDB file.

    ``DuckDBForgetStore(path)`` opens (and owns) the index; :meth:`over` forgets through an
    index that is already open, the live writer's, and never closes it. ``compact=False``
    disables the fallback rewrite (figures then say ``clean: 0`` where it would have run).
    """

    def __init__(self, path: Path, *, compact: bool = True) -> None:
        self.path = Path(path)
        self.index = DuckDBEventIndex(self.path)
        self._compact = compact

    @classmethod
    def over(cls, index: DuckDBEventIndex, *, compact_fallback: bool = True) -> DuckDBForgetStore:
        """A forget store over the open writer's ``index`` (not closed by erase or purge)."""
        store = cls.__new__(cls)
        store.path, store.index, store._compact = index.path, index, compact_fallback
        return store

    @property
    def name(self) -> str:
        return NAME

    def forget(self, targets: Tombstones) -> ForgetReport:
        """:meth:`erase`, then :meth:`purge` (the batch paths and the contract suite)."""
        return erased_then_purged(NAME, targets, self.erase,
                                  lambda: self.purge(AuditProbe.of(targets).byte_probes))

    def erase(self, targets: Tombstones) -> dict[str, int]:
        """:meth:`erase_all` of one request."""
        return self.erase_all([targets])[0]

    def erase_all(self, batch: Sequence[Tombstones]) -> list[dict[str, int]]:
        """In one transaction for the whole batch (disjoint targets): note and blank the
        forgotten content, recompute the fact versions, delete the rows. Queries no longer
        return them once this returns. Per request, the rows its events' ids deleted."""
        owner = {i: n for n, targets in enumerate(batch) for i in targets.event_ids}
        ids = sorted(owner)
        mutations = [m for targets in batch for m in targets.fact_mutations]
        deleted = [dict.fromkeys((t for t, _ in _DELETES), 0) for _ in batch]
        with self.index.transaction("forget erase") as con:
            shred.blank(con, ids)
            if mutations:
                self.index.write(con, mutations, {}, topic="")
            for table, column in _DELETES:
                gone = con.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?)) "
                                   f"RETURNING {column}", [ids]).fetchall()
                for (event_id,) in gone:
                    deleted[owner[event_id]][table] += 1
        return deleted

    def purge(self, probes: Sequence[bytes] = (),
              exclusive: Callable[[], AbstractContextManager[None]] = nullcontext,
              ) -> dict[str, float]:
        """Checkpoint, fill the free blocks, check; rewrite the touched tables if needed; all
        inside ``exclusive()`` (a ``CHECKPOINT`` is skipped, silently, while a reader holds a
        transaction: the service's read gate keeps readers out).

        Correct without ``probes`` (after a restart): the erase noted the blocks durably. With
        probes, the file and WAL are also scanned (a hit forces the fallback)."""
        began = time.monotonic()
        with exclusive(), self.index.exclusive("forget purge") as con:
            noted = shred.pending(con)
            t = time.monotonic()
            con.execute("CHECKPOINT")
            out = {"noted_blocks": float(len(noted)), "checkpoint_s": time.monotonic() - t}
            shared = shred.shared_blocks(con, noted)
            out["shared_blocks"] = float(len(shared))
            if shared:
                shared, released = shred.release_shared(con, set(shared))
                out |= released
            if noted:  # a shared block stays noted until a purge with the fallback frees it
                shred.clear_pending(con, keep=() if self._compact else shared)
            out |= {"shared_left": float(len(shared)), "compacted": 0.0}
            if shared and self._compact:  # the fallback fills and scans after its rewrite
                out |= {"free_blocks": 0.0, "unfilled_blocks": 0.0, "fill_s": 0.0,
                        "probe_hits": 0.0}
                out |= self._fallback(con, shared, probes)
            else:
                out |= shred.fill_free_blocks(con)
                hits = self._scan(probes)
                out["probe_hits"] = float(len(hits))
                if shared or hits or out["unfilled_blocks"]:
                    out |= self._fallback(con, shared, probes)
        out["clean"] = float(_clean(out))
        out["purge_s"] = time.monotonic() - began
        out["s"] = out["purge_s"]
        return out

    def _scan(self, probes: Sequence[bytes]) -> dict[str, int]:
        t = time.monotonic()
        hits = files_containing(self._files(), list(probes))
        log.debug("scanned %s for %d probes in %.3f s", self.path, len(probes),
                  time.monotonic() - t)
        return hits

    def _fallback(self, con: duckdb.DuckDBPyConnection, shared: dict[int, set[str]],
                  probes: Sequence[bytes]) -> dict[str, float]:
        """Rewrite the tables using a shared block (every event table on a probe hit)."""
        tables = set().union(*shared.values()) if shared else set(EVENT_TABLES)
        if not self._compact:
            log.warning("forget purge of %s left %d shared blocks; the fallback is disabled",
                        self.path, len(shared))
            return {}
        t = time.monotonic()
        shred.rewrite_tables(con, tables)
        fill = shred.fill_free_blocks(con)
        hits = self._scan(probes)
        log.info("forget purge of %s fell back to rewriting %s (%.2f s)", self.path,
                 sorted(tables), time.monotonic() - t)
        return {"compacted": 1.0, "compact_s": time.monotonic() - t,
                "refill_free_blocks": fill["free_blocks"],
                "unfilled_blocks": fill["unfilled_blocks"], "probe_hits": float(len(hits))}

    def _files(self) -> list[str]:
        return [str(p) for p in (self.path, self.path.with_name(self.path.name + ".wal"))
                if p.exists()]

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
        hits = files_containing(self._files(), probe.byte_probes)
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
        gone = pa.array(sorted(probe.event_ids), pa.string())
        for tt in (*times[::step], *times[-1:]):  # the readers' as-of queries, ids counted
            records = self.index.records_table(tenant, until=tt + _US, columns="event_id")
            versions = self.index.facts_as_of_table(tenant, valid=tt, known=tt)
            found += _count_in(records.column("event_id"), gone)
            found += _count_in(versions.column("source_event_id"), gone)
        return [Residual(NAME, "as_of", found, f"{len(probe.known_times)} known times")] \
            if found else []

    def close(self) -> None:
        self.index.close()

