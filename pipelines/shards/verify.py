"""Content hashes of a sharded deployment's stores, comparable with one store's.

The shards together hold what one store holds: every table's rows are the union of the
shards' rows, except the fact versions, which a shard computes from its own entries only
(a key whose entries straddle partitions gets versions from part of them on each shard; the
router never reads them, see :mod:`memstack.server.router.view`). So the union of records,
fact entries, offsets and memories is hashed as one table each, and the fact versions are
recomputed from the union of the entries with the projector's fact operator. Equal hashes
mean the sharded deployment answers from the same content as the single store
(``memstack bench scale``'s ``verify_equal``, ``memstack shards verify``).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from memstack.operators.facts import FactOperator
from memstack.pipelines.shards.layout import shard_dir, shard_partitions
from memstack.pipelines.stores import arrow
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.duckdb_schema import q
from memstack.pipelines.stores.lance_index import TABLE
from memstack.schemas.rows import PRIMARY_KEYS

UNION_TABLES = ("records", "fact_entries", "offsets")


def sharded_hashes(root: Path) -> dict[str, str]:
    """Per table, the hash of the union of all shards under ``root`` (read-only; the workers
    must have stopped: DuckDB admits no reader beside its writer process)."""
    parts: dict[str, list[pa.Table]] = {t: [] for t in (*UNION_TABLES, TABLE)}
    for partition in shard_partitions(root):
        with Stores.open(shard_dir(root, partition), read_only=True) as stores:
            for table in UNION_TABLES:
                parts[table].append(stores.events.query(f"SELECT * FROM {q(table)}"))
            parts[TABLE].append(stores.vectors.scan())
    out = {t: arrow.table_hash(pa.concat_tables(ts), PRIMARY_KEYS[t])
           for t, ts in parts.items() if ts}
    out["fact_versions"] = _versions_hash(parts["fact_entries"])
    return dict(sorted(out.items()))


def _versions_hash(entries: list[pa.Table]) -> str:
    index = DuckDBEventIndex(Path(":memory:"))
    try:
        merged = [e for t in entries for e in arrow.to_entries(t)]
        index.apply(FactOperator().apply_entries(merged), {}, topic="memstack.verify")
        return index.content_hashes()["fact_versions"]
    finally:
        index.close()


def single_hashes(directory: Path) -> dict[str, str]:
    """The same hashes of one stores directory (all partitions in one store)."""
    with Stores.open(directory, read_only=True) as stores:
        return dict(sorted(stores.content_hashes().items()))
