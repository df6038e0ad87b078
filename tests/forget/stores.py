"""The DuckDB and LanceDB stores under the forget contract (real stores, real model)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from memstack.operators.log import LoggedEvent
from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import PutMemory
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.forgetting.duckdb_store import DuckDBForgetStore
from memstack.pipelines.forgetting.lance_store import LanceForgetStore
from memstack.pipelines.stores.lance_index import IndexPolicy, quote


class DuckDBUnderTest:
    def __init__(self, path: Path) -> None:
        self.store = DuckDBForgetStore(path)

    def load(self, events: Sequence[LoggedEvent]) -> None:
        self.store.index.apply(MemoryOperator().apply_batch(events), {}, topic="t")

    def visible_ids(self, tenant: str) -> set[str]:
        ids = {r.event_id for r in self.store.index.records(tenant)}
        table = self.store.index.query("SELECT event_id FROM fact_entries WHERE tenant = ? "
                      "UNION SELECT source_event_id FROM fact_versions WHERE tenant = ?",
                      [tenant, tenant])
        return ids | set(table.column(0).to_pylist())

    def fingerprint(self) -> str:
        hashes = self.store.index.content_hashes()
        return "|".join(f"{k}={hashes[k]}" for k in sorted(hashes) if k != "offsets")


SMALL = IndexPolicy(vector_min_rows=1_000_000)


class LanceUnderTest:
    def __init__(self, directory: Path, encoder: Encoder,
                 policy: IndexPolicy = SMALL) -> None:
        self.store = LanceForgetStore(directory, policy=policy)
        self.encoder = encoder

    def load(self, events: Sequence[LoggedEvent]) -> None:
        rows = [m.row for m in MemoryOperator().apply_batch(events) if isinstance(m, PutMemory)]
        if rows:
            self.store.index.merge(rows, self.encoder.encode([r.text for r in rows]))

    def visible_ids(self, tenant: str) -> set[str]:
        table = self.store.index.lance_table
        n = max(1, int(table.count_rows()))
        found = table.search().where(f"tenant = {quote(tenant)}").select(["event_id"]) \
            .limit(n).to_arrow()
        return set(found.column("event_id").to_pylist())

    def fingerprint(self) -> str:
        return self.store.index.content_hash()
