"""``ForgetStores``: the forgettable DuckDB and LanceDB stores of one stores directory.

Owns the store handles it opened (the live worker passes its writer's indexes instead);
:attr:`stores` gives a :class:`Stores` bundle over the current handles for queries and
projection. Requests already applied are recorded in
``forget_applied.json`` next to the stores, so ``memstack forget apply`` applies each request
once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import Self

from memstack.pipelines.forgetting.contract import Forgettable
from memstack.pipelines.forgetting.duckdb_store import DuckDBForgetStore
from memstack.pipelines.forgetting.lance_store import LanceForgetStore
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.lance_index import IndexPolicy, LanceVectorIndex
from memstack.pipelines.stores.layout import DUCKDB_FILE, LANCE_DIR
from memstack.schemas.rows import EMBEDDING_DIM

APPLIED_FILE = "forget_applied.json"


class ForgetStores:
    def __init__(self, directory: Path, *, dim: int = EMBEDDING_DIM,
                 policy: IndexPolicy | None = None,
                 events: DuckDBEventIndex | None = None,
                 vectors: LanceVectorIndex | None = None) -> None:
        """Open the stores of ``directory``. ``events`` and ``vectors``: the live writer's open
        indexes, to forget through (their locks order the forget with the writer's commits);
        closing this bundle leaves them open."""
        self.directory = Path(directory)
        self._owns = (events is None, vectors is None)
        self.duckdb = (DuckDBForgetStore(self.directory / DUCKDB_FILE) if events is None
                       else DuckDBForgetStore.over(events))
        try:
            self.lance = (LanceForgetStore(self.directory / LANCE_DIR, dim=dim, policy=policy)
                          if vectors is None else LanceForgetStore.over(vectors))
        except BaseException:
            if self._owns[0]:
                self.duckdb.close()
            raise

    @property
    def stores(self) -> Stores:
        """The stores over the current handles (valid until the next forget)."""
        return Stores(self.directory, self.duckdb.index, self.lance.index)

    def forgettables(self) -> list[Forgettable]:
        return [self.duckdb, self.lance]

    def applied(self) -> set[str]:
        path = self.directory / APPLIED_FILE
        if not path.exists():
            return set()
        return set(json.loads(path.read_text()))

    def mark_applied(self, request_id: str) -> None:
        done = sorted(self.applied() | {request_id})
        path = self.directory / APPLIED_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(done))
        os.replace(tmp, path)

    def close(self) -> None:
        if self._owns[1]:
            self.lance.close()
        if self._owns[0]:
            self.duckdb.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
