"""Content hashes of two sets of stores, store by store: equal means equal.

The hashes are the stores' own (``Stores.content_hashes``): ``records``, ``fact_entries``,
``fact_versions``, ``offsets`` (DuckDB) and ``memories`` (LanceDB rows with embeddings rounded
to ``memstack.pipelines.stores.arrow.VECTOR_TOLERANCE``, 1e-4).

Rounding alone is fragile: the same text embedded in a batch of another shape differs by ~1e-7,
and a component that sits next to a rounding boundary rounds the other way. So when the
``memories`` hashes differ, the rows are compared directly: every column but the vector equal,
and every vector component within the tolerance. ``vector_max_diff`` reports the largest gap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from memstack.pipelines.replay.errors import ReplayError
from memstack.pipelines.stores.arrow import VECTOR_TOLERANCE, table_hash

MEMORIES = "memories"


@dataclass(frozen=True)
class Comparison:
    a: Path
    b: Path
    hashes_a: dict[str, str]
    hashes_b: dict[str, str]
    within_tolerance: frozenset[str] = frozenset()
    """Stores whose hashes differ but whose rows are equal within the vector tolerance."""
    vector_max_diff: float | None = None

    @property
    def stores(self) -> list[str]:
        return sorted(set(self.hashes_a) | set(self.hashes_b))

    def differing(self) -> list[str]:
        return [s for s in self.stores if self.hashes_a.get(s) != self.hashes_b.get(s)
                and s not in self.within_tolerance]

    @property
    def equal(self) -> bool:
        return not self.differing()

    def to_json(self) -> str:
        return json.dumps({
            "equal": self.equal, "a": str(self.a), "b": str(self.b),
            "vector_tolerance": VECTOR_TOLERANCE, "vector_max_diff": self.vector_max_diff,
            "stores": {s: {"a": self.hashes_a.get(s), "b": self.hashes_b.get(s),
                           "equal": s not in self.differing()}
                       for s in self.stores},
        }, indent=2)

    def lines(self) -> list[str]:
        out = [f"{s:<14} {'equal' if s not in self.differing() else 'DIFFERENT':<9} "
               f"{(self.hashes_a.get(s) or '-')[:16]}  {(self.hashes_b.get(s) or '-')[:16]}"
               for s in self.stores]
        if self.within_tolerance:
            out.append(f"memories: hashes differ, rows equal with vectors within "
                       f"{VECTOR_TOLERANCE:g} (max diff {self.vector_max_diff:.2e})")
        out.append("EQUAL" if self.equal else f"DIFFERENT: {', '.join(self.differing())}")
        return out


def store_hashes(directory: Path) -> dict[str, str]:
    """The per-store content hashes of the stores in ``directory`` (opened read-only)."""
    from memstack.pipelines.stores.bundle import Stores
    from memstack.pipelines.stores.layout import DUCKDB_FILE

    if not (directory / DUCKDB_FILE).exists():
        raise ReplayError(f"{directory} holds no stores (no {DUCKDB_FILE}); give a directory "
                          "written by the live pipeline or by `memstack replay --into`")
    with Stores.open(directory, read_only=True) as stores:
        return stores.content_hashes()


def compare(a: Path, b: Path) -> Comparison:
    ha, hb = store_hashes(a), store_hashes(b)
    if ha.get(MEMORIES) == hb.get(MEMORIES) or MEMORIES not in ha or MEMORIES not in hb:
        return Comparison(a, b, ha, hb)
    close, max_diff = memories_within_tolerance(a, b)
    return Comparison(a, b, ha, hb, frozenset({MEMORIES}) if close else frozenset(), max_diff)


def _memories(directory: Path) -> pa.Table:
    import lancedb

    from memstack.pipelines.stores.lance_index import TABLE
    from memstack.pipelines.stores.layout import LANCE_DIR

    table: pa.Table = lancedb.connect(directory / LANCE_DIR).open_table(TABLE).to_arrow()
    return table.sort_by("memory_id").combine_chunks()


def memories_within_tolerance(a: Path, b: Path,
                              tolerance: float = VECTOR_TOLERANCE) -> tuple[bool, float | None]:
    """Rows equal but for vectors, and vectors equal within ``tolerance`` per component."""
    ta, tb = _memories(a), _memories(b)
    if ta.num_rows != tb.num_rows or ta.column_names != tb.column_names:
        return False, None
    others = [n for n in ta.column_names if n != "vector"]
    if table_hash(ta.select(others), ["memory_id"]) != table_hash(tb.select(others),
                                                                  ["memory_id"]):
        return False, None
    va = ta.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    vb = tb.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    diff = float(np.max(np.abs(va - vb))) if va.size else 0.0
    return diff <= tolerance, diff
