"""The event index's records read, in DuckDB: one query with every condition and the limit.

The as-of rule comes from :mod:`memstack.schemas.asof` (its DuckDB form over
:data:`~memstack.schemas.asof.RECORDS`), the metadata filter from
:func:`~memstack.schemas.filter_sql.to_duckdb`; the ``LIMIT`` applies after all of them, so a
read with a limit converts only the rows it returns.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memstack.foundation.log_coordinates import LogCut
from memstack.schemas import asof as rule
from memstack.schemas.filter_sql import to_duckdb
from memstack.schemas.filters import Filter

RecordsAsOf = tuple[datetime, datetime | LogCut]
"""``(valid, known)`` of a records read (a known time or cut)."""


def records_sql(tenant: str, *, session: str | None = None, since: datetime | None = None,
                until: datetime | None = None, limit: int | None = None, columns: str = "*",
                filter: Filter | None = None, as_of: RecordsAsOf | None = None,
                start: datetime | None = None, end: datetime | None = None
                ) -> tuple[str, list[Any]]:
    """The query (``?`` parameters) and its parameters: the tenant's records (of ``session``)
    with ``since <= tt < until``, answering as of ``as_of``, occurred in ``[start, end)``,
    passing ``filter``, in log order, at most ``limit``; ``columns``: the select list."""
    sql = [f"SELECT {columns} FROM records WHERE tenant = ?"]
    params: list[Any] = [tenant]
    for clause, value in (("session = ?", session), ("tt >= ?", since), ("tt < ?", until),
                          ("occurred_at >= ?", start), ("occurred_at < ?", end)):
        if value is not None:
            sql.append(f"AND {clause}")
            params.append(value)
    if as_of is not None:
        where, values = rule.duckdb_sql(as_of[0], as_of[1], rule.RECORDS)
        sql.append(f"AND {where}")
        params += values
    if filter is not None:
        where, values = to_duckdb(filter)
        sql.append(f"AND {where}")
        params += values
    sql.append('ORDER BY tt, "partition", "offset"')
    if limit is not None:
        sql.append(f"LIMIT {int(limit)}")
    return " ".join(sql), params
