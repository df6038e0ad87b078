"""The event index's read interface, as the inspector's catalog reads it.

``DuckDBEventIndex`` runs every read on its own cursor (an MVCC snapshot), so reads are safe
in the writer process while batches commit; they go through ``query(sql, params)``
(:class:`SqlReader`). The as-of reads of facts are store primitives
(``EventIndex.facts_as_of`` and ``fact_history``, with ``known`` a time, a position or a cut).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import pyarrow as pa


class SqlReader(Protocol):
    def query(self, sql: str, params: Sequence[Any] = ()) -> pa.Table: ...
