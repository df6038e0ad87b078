"""The stores behind the indexes: interfaces, backend implementations and the bundle."""

from memstack.pipelines.stores.base import (
    ApplyResult,
    EventIndex,
    Maintenance,
    MemoryHit,
    MergeResult,
    VectorIndex,
)
from memstack.pipelines.stores.bundle import Stores, stores_dir
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.lance_index import IndexPolicy, LanceVectorIndex

__all__ = [
    "ApplyResult",
    "DuckDBEventIndex",
    "EventIndex",
    "IndexPolicy",
    "LanceVectorIndex",
    "Maintenance",
    "MemoryHit",
    "MergeResult",
    "Stores",
    "VectorIndex",
    "stores_dir",
]
