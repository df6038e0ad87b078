"""One tenant's full-text (BM25) candidates from the LanceDB ``memories`` table.

Under a prefilter that keeps at most a tenth of the table, LanceDB scores every row the filter
keeps (~0.17 us a row: 17 ms for a tenant of 100k rows); otherwise it skips through the posting
lists (~1 ms). So for a tenant with many rows :class:`TenantTextSearch` ranks the top
``margin * k / share`` rows of all tenants and keeps the tenant's (a LanceDB postfilter): they
are its top ``k``, since BM25 scores do not depend on the filter. When fewer than ``k`` are kept
and more rows match than were ranked, when ranking would cost more than the prefilter (see
:class:`~memstack.pipelines.stores.lance_policy.IndexPolicy`), or when a scope clause narrows
the search, the tenant prefilter answers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from memstack.pipelines.stores.lance_policy import IndexPolicy


class TenantTextSearch:
    """BM25 over ``table`` for one tenant at a time; ``tenant_clause`` is the tenant's filter."""

    def __init__(self, table: Any, policy: IndexPolicy,
                 tenant_clause: Callable[[str], str]) -> None:
        self._table = table
        self._policy = policy
        self._tenant_clause = tenant_clause
        self._shares: dict[str, tuple[int, int, float]] = {}

    def top(self, text: str, tenant: str, k: int, clause: str, *, scoped: bool,
            columns: Sequence[str]) -> pa.Table:
        """The top ``k`` rows under ``clause`` (the tenant's filter, narrowed when ``scoped``),
        with ``_rowid`` and LanceDB's ``_score``."""
        ranked = None if scoped else self.overfetch(tenant, k)
        if ranked is not None:
            found = self.bm25(text, clause, ranked, columns, prefilter=False)
            if found.num_rows >= k or self.matches(text, ranked) < ranked:
                return found.slice(0, k)  # or every match was ranked
        return self.bm25(text, clause, k, columns, prefilter=True)

    def bm25(self, text: str, clause: str, k: int, columns: Sequence[str], *,
             prefilter: bool) -> pa.Table:
        found: pa.Table = (self._table.search(text, query_type="fts", fts_columns="text")
                           .where(clause, prefilter=prefilter)
                           .select([*columns, "_score"]).with_row_id(True).limit(k)
                           .to_arrow())
        return found

    def matches(self, text: str, limit: int) -> int:
        """How many rows of all tenants match ``text``, counting up to ``limit`` (~3 ms)."""
        found = (self._table.search(text, query_type="fts", fts_columns="text")
                 .select(["_score"]).limit(limit).to_arrow())
        return int(found.num_rows)

    def overfetch(self, tenant: str, k: int) -> int | None:
        """How many rows of all tenants to rank for the tenant's top ``k``; None: prefilter."""
        rows, total = self._tenant_rows(tenant)
        if rows == 0:
            return None
        ranked = math.ceil(self._policy.text_overfetch_margin * k * total / rows)
        cheaper = rows >= self._policy.text_overfetch_cost * ranked
        return ranked if cheaper and ranked <= self._policy.text_overfetch_max else None

    def _tenant_rows(self, tenant: str) -> tuple[int, int]:
        """The tenant's rows and all rows (cached for ``policy.index_check_every`` s)."""
        now = time.monotonic()
        cached = self._shares.get(tenant)
        if cached is not None and now - cached[2] <= self._policy.index_check_every:
            return cached[0], cached[1]
        total = int(self._table.count_rows())
        rows = int(self._table.count_rows(self._tenant_clause(tenant))) if total else 0
        self._shares[tenant] = (rows, total, now)
        return rows, total
