"""``bench pipeline``'s count of Lance maintenance passes (``maintenance_*``), against a real
LanceDB table that crosses the refresh threshold."""

from __future__ import annotations

from pathlib import Path

from memstack.jobs.bench.pipeline import MaintenanceLog
from memstack.pipelines.stores.lance_index import IndexPolicy, LanceVectorIndex
from tests.pipelines.helpers import unit_vectors
from tests.pipelines.vector_index_contract import rows_of


def test_each_refresh_is_counted(tmp_path: Path) -> None:
    index = LanceVectorIndex(tmp_path / "lance",
                             policy=IndexPolicy(vector_min_rows=10_000, refresh_rows=100))
    rows, vecs = rows_of(330), unit_vectors(330)
    index.merge(rows[:30], vecs[:30])  # the first indexes: a pass before the count starts
    with MaintenanceLog() as log:
        for lo in range(30, 330, 50):  # 300 rows: a refresh after every 100
            index.merge(rows[lo:lo + 50], vecs[lo:lo + 50])
    assert log.passes == 3
