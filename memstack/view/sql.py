"""Reads the store interface has no primitive for yet, as SQL on the event index's read cursor.

``DuckDBEventIndex`` runs every read on its own cursor (an MVCC snapshot), so these are safe in
the writer process while batches commit. They go through the index's read interface,
``query(sql, params)`` (:class:`SqlReader`).

Facts as known at a :class:`LogCut`: the versions of one fact key ``(tenant, subject,
relation)`` are a function of that key's entries only, in transaction-time order. So a cut is
applied per key: with ``first`` the earliest entry of the key *outside* the cut, the versions
known at the cut are those with ``tt_from < first <= tt_to`` (``first`` absent: the current
ones). This is exact whenever the cut holds a transaction-time prefix of each key's entries,
which is the case for any cut the stores reported as applied unless one key's events were
spread over partitions consumed at different speeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import pyarrow as pa

from memstack.operators.log import LogPosition
from memstack.pipelines.stores import arrow
from memstack.pipelines.stores.duckdb_schema import q
from memstack.schemas import asof
from memstack.schemas.rows import FACT_VERSIONS
from memstack.view.types import Fact, LogCut

_COLS = ", ".join(f"v.{q(n)}" for n in FACT_VERSIONS.names)


class SqlReader(Protocol):
    def query(self, sql: str, params: Sequence[Any] = ()) -> pa.Table: ...


def _firsts(tenant: str, cut: LogCut, subject: str | None,
            relation: str | None) -> tuple[str, list[Any]]:
    """SQL (a CTE body) of the first entry outside the cut, per key."""
    sql = ("SELECT e.subject, e.relation, e.tt AS f_tt, e.tt_partition AS f_p, "
           "e.tt_offset AS f_o FROM fact_entries e "
           "LEFT JOIN (SELECT unnest(?::INTEGER[]) AS p, unnest(?::BIGINT[]) AS n) c "
           "ON c.p = e.tt_partition WHERE e.tenant = ? AND e.tt_offset >= coalesce(c.n, 0)")
    params: list[Any] = [[p for p, _ in cut.offsets], [o for _, o in cut.offsets], tenant]
    for column, value in (("subject", subject), ("relation", relation)):
        if value is not None:
            sql += f" AND e.{column} = ?"
            params.append(value)
    sql += (" QUALIFY row_number() OVER (PARTITION BY e.subject, e.relation "
            "ORDER BY e.tt, e.tt_partition, e.tt_offset) = 1")
    return sql, params


def first_unknown(events: SqlReader, tenant: str, cut: LogCut, subject: str | None = None,
                  relation: str | None = None) -> dict[tuple[str, str], LogPosition]:
    """Per fact key of ``tenant``, the position of its earliest entry outside ``cut``."""
    sql, params = _firsts(tenant, cut, subject, relation)
    out: dict[tuple[str, str], LogPosition] = {}
    for row in events.query(sql, params).to_pylist():
        out[(row["subject"], row["relation"])] = LogPosition(
            row["f_tt"].astimezone(UTC), int(row["f_p"]), int(row["f_o"]))
    return out


def facts_at_cut(events: SqlReader, tenant: str, cut: LogCut, vt: datetime,
                 subject: str | None = None, relation: str | None = None) -> list[Fact]:
    """Fact versions valid at ``vt`` as known at ``cut`` (see the module docstring)."""
    firsts, params = _firsts(tenant, cut, subject, relation)
    valid, valid_params = asof.duckdb_sql(vt, None, alias="v.")
    sql = [f"WITH u AS ({firsts}) SELECT {_COLS} FROM fact_versions v "
           "LEFT JOIN u ON u.subject = v.subject AND u.relation = v.relation "
           f"WHERE v.tenant = ? AND {valid} AND "
           "((u.f_tt IS NULL AND v.tt_to IS NULL) OR (u.f_tt IS NOT NULL AND "
           "(v.tt_from, v.tt_from_partition, v.tt_from_offset) < (u.f_tt, u.f_p, u.f_o) AND "
           "(v.tt_to IS NULL OR (v.tt_to, v.tt_to_partition, v.tt_to_offset) >= "
           "(u.f_tt, u.f_p, u.f_o))))"]
    params += [tenant, *valid_params]
    for column, value in (("subject", subject), ("relation", relation)):
        if value is not None:
            sql.append(f"AND v.{column} = ?")
            params.append(value)
    sql.append("ORDER BY v.subject, v.relation, v.vt_from, v.object")
    return arrow.to_versions(events.query(" ".join(sql), params))
