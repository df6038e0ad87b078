"""Compare two deployments' stores by what survives a move between logs.

``verify`` compares stores built from *one* log: equal hashes of every row, log positions
included. Stores built from *another* log - an export imported into a fresh deployment, or the
same log replayed with another encoder - hold the same events under other log positions and
transaction times (or other vectors), so their plain hashes differ by design. This module
compares the part that must still be equal:

- ``records``, ``fact_entries``: every column but the log position and transaction time
  (``tt``, ``partition``, ``offset``);
- ``current_facts``: the fact versions current in transaction time, without their version id,
  transaction interval or closing event (valid interval, value and source event kept);
- ``memories``: every column but the log position, the transaction interval and the vector;
- ``vectors`` (unless ``vectors=False``, e.g. after a re-embedding): the same memory ids, each
  vector within :data:`VECTOR_TOLERANCE` per component.

``tenant`` restricts every table to one tenant (an export is one tenant's).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memstack.pipelines.replay.errors import ReplayError
from memstack.pipelines.replay.verify import Comparison
from memstack.pipelines.stores.arrow import VECTOR_TOLERANCE, table_hash
from memstack.pipelines.stores.bundle import Stores

LOG_COLUMNS: dict[str, tuple[str, ...]] = {
    "records": ("tt", "partition", "offset"),
    "fact_entries": ("tt", "tt_partition", "tt_offset"),
    "memories": ("tt_from", "tt_to", "partition", "offset", "vector"),
}
CURRENT_FACT_COLUMNS = ("tenant", "subject", "relation", "object", "vt_from", "vt_to",
                        "source_event_id")
KEYS: dict[str, list[str]] = {
    "records": ["event_id"], "fact_entries": ["event_id"], "memories": ["memory_id"],
    "current_facts": ["tenant", "subject", "relation", "object", "vt_from", "source_event_id"],
}
VECTORS = "vectors"


def _of_tenant(table: pa.Table, tenant: str | None) -> pa.Table:
    return table if tenant is None else table.filter(pc.equal(table["tenant"], tenant))


def portable_tables(stores: Stores, tenant: str | None = None) -> dict[str, pa.Table]:
    """The log-independent content of ``stores``, table by table."""
    out = {name: _of_tenant(stores.events.table(name), tenant).drop_columns(
        list(LOG_COLUMNS[name])) for name in ("records", "fact_entries")}
    versions = _of_tenant(stores.events.table("fact_versions"), tenant)
    out["current_facts"] = versions.filter(pc.is_null(versions["tt_to"])).select(
        list(CURRENT_FACT_COLUMNS))
    memories = _of_tenant(stores.vectors.table(), tenant)
    out["memories"] = memories.drop_columns(list(LOG_COLUMNS["memories"]))
    return out


def portable_hashes(stores: Stores, tenant: str | None = None) -> dict[str, str]:
    return {name: table_hash(table, KEYS[name])
            for name, table in portable_tables(stores, tenant).items()}


def vector_max_diff(a: Stores, b: Stores, tenant: str | None = None) -> float | None:
    """The largest per-component gap between the two stores' vectors of the same memory ids;
    None when the ids (or dimensions) differ."""
    ta = _of_tenant(a.vectors.table(), tenant).sort_by("memory_id")
    tb = _of_tenant(b.vectors.table(), tenant).sort_by("memory_id")
    if ta["memory_id"].to_pylist() != tb["memory_id"].to_pylist():
        return None
    va = ta["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
    vb = tb["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
    if va.shape != vb.shape:
        return None
    return float(np.max(np.abs(va - vb))) if va.size else 0.0


def compare_stores(a: Stores, b: Stores, *, tenant: str | None = None,
                   vectors: bool = True) -> Comparison:
    """Equal when every log-independent table hashes equal (and vectors are close)."""
    ha, hb = portable_hashes(a, tenant), portable_hashes(b, tenant)
    diff = None
    if vectors:
        diff = vector_max_diff(a, b, tenant)
        close = diff is not None and diff <= VECTOR_TOLERANCE
        ha[VECTORS] = f"within {VECTOR_TOLERANCE:g}" if close else f"max diff {diff}"
        hb[VECTORS] = f"within {VECTOR_TOLERANCE:g}"
    return Comparison(a.directory, b.directory, ha, hb, vector_max_diff=diff)


def compare_portable(a: Path, b: Path, *, tenant: str | None = None,
                     vectors: bool = True) -> Comparison:
    """:func:`compare_stores` over two stores directories, opened read-only."""
    from memstack.pipelines.stores.layout import DUCKDB_FILE

    for directory in (a, b):
        if not (directory / DUCKDB_FILE).exists():
            raise ReplayError(f"{directory} holds no stores (no {DUCKDB_FILE}); give a "
                              "directory written by the live pipeline or `memstack replay`")
    with Stores.open(a, read_only=True) as sa, Stores.open(b, read_only=True) as sb:
        return compare_stores(sa, sb, tenant=tenant, vectors=vectors)


def compare_reindexed(a: Stores, b: Stores) -> Comparison:
    """Two stores of the *same* log embedded by different encoders: every DuckDB table equal
    (records, fact entries and versions, offsets) and the memory rows equal but for their
    vectors (which differ by design). Row counts are part of each hash."""
    ha, hb = a.events.content_hashes(), b.events.content_hashes()
    for hashes, stores in ((ha, a), (hb, b)):
        rows = stores.vectors.table().drop_columns(["vector"])
        hashes["memories"] = table_hash(rows, KEYS["memories"])
    return Comparison(a.directory, b.directory, ha, hb)
