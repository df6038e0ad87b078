"""The event index's as-of reads of fact versions, in DuckDB: one query per as-of question.

Which versions were *known* is never written here: every ``WHERE`` on transaction time is
rendered from the rule of :mod:`memstack.schemas.asof` (:data:`~memstack.schemas.asof.VERSIONS`),
for a time, a log position or a log cut. A cut applies per fact key (see that module): the
query joins each version with its key's earliest entry outside the cut (the columns of
``VERSIONS.first``), which the rule then compares with.

Each function takes the index's ``query`` (its read cursor, an MVCC snapshot).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from memstack.foundation.log_coordinates import LogCut, LogPosition
from memstack.operators.mutations import FactVersion
from memstack.pipelines.stores import arrow
from memstack.pipelines.stores.duckdb_schema import by_subject, q
from memstack.schemas import asof
from memstack.schemas.rows import FACT_VERSIONS

Query = Callable[[str, Sequence[Any]], pa.Table]
"""``DuckDBEventIndex.query``: read SQL with ``?`` parameters, as Arrow."""

Known = datetime | LogPosition | LogCut
"""What a fact read may be as of in transaction terms: a time, a position or a cut."""

VERSION_COLS = ", ".join(q(n) for n in FACT_VERSIONS.names)
_ALIASED = ", ".join(f"v.{q(n)}" for n in FACT_VERSIONS.names)
_FIRST = asof.FIRST
_CLOSED = "_closed"


def _source(subject: str | None) -> tuple[str, list[Any]]:
    """``SELECT <version columns> FROM`` the versions of ``subject`` (by index) or all."""
    if subject is None:
        return f"SELECT {VERSION_COLS} FROM fact_versions", []
    return f"{by_subject('fact_versions', VERSION_COLS)}SELECT {VERSION_COLS} FROM k", [subject]


def _keys(column: str, subject: str | None, relation: str | None,
          sql: list[str], params: list[Any]) -> None:
    """``AND`` the subject and relation filters (columns prefixed by ``column``)."""
    for name, value in (("subject", subject), ("relation", relation)):
        if value is not None:
            sql.append(f"AND {column}{name} = ?")
            params.append(value)


def _firsts(tenant: str, cut: LogCut, subject: str | None,
            relation: str | None) -> tuple[str, list[Any]]:
    """A CTE ``u``: per fact key of ``tenant``, its earliest entry outside ``cut`` (in
    transaction-time order), as the columns of ``VERSIONS.first``."""
    sql = [f"WITH u AS (SELECT e.subject, e.relation, e.tt AS {_FIRST.time}, "
           f"e.tt_partition AS {_FIRST.partition}, e.tt_offset AS {_FIRST.offset} "
           f"FROM fact_entries e WHERE e.tenant = ? AND "
           f"{asof.duckdb_outside(cut, asof.ENTRIES, alias='e.')}"]
    params: list[Any] = [tenant]
    _keys("e.", subject, relation, sql, params)
    sql.append("QUALIFY row_number() OVER (PARTITION BY e.subject, e.relation "
               "ORDER BY e.tt, e.tt_partition, e.tt_offset) = 1) ")
    return " ".join(sql), params


def _at_cut(tenant: str, cut: LogCut, subject: str | None, relation: str | None,
            select: str, select_params: Sequence[Any] = ()) -> tuple[list[str], list[Any]]:
    """``SELECT <select> FROM`` the tenant's versions ``v`` (of ``subject``/``relation``)
    joined with their key's first entry outside ``cut``; ends in an open ``WHERE``."""
    firsts, params = _firsts(tenant, cut, subject, relation)
    sql = [f"{firsts}SELECT {select} FROM fact_versions v LEFT JOIN u "
           "ON u.subject = v.subject AND u.relation = v.relation WHERE v.tenant = ?"]
    params += [*select_params, tenant]
    _keys("v.", subject, relation, sql, params)
    return sql, params


def facts_table(query: Query, tenant: str, *, subject: str | None = None,
                relation: str | None = None, valid: datetime | None = None,
                known: Known | None = None) -> pa.Table:
    """Versions of ``tenant`` valid at ``valid`` as known at ``known`` (a time, a position
    or a cut; both default to now), ordered by subject, relation, ``vt_from``, object."""
    now = datetime.now(UTC)
    valid = valid or now
    if isinstance(known, LogCut):
        where, rule = asof.duckdb_sql(valid, known, asof.VERSIONS, alias="v.")
        sql, params = _at_cut(tenant, known, subject, relation, _ALIASED)
        sql += [f"AND {where}", "ORDER BY v.subject, v.relation, v.vt_from, v.object"]
        return query(" ".join(sql), [*params, *rule])
    head, params = _source(subject)
    where, rule = asof.duckdb_sql(valid, known or now, asof.VERSIONS)
    sql = [head, f"WHERE tenant = ? AND {where}"]
    params += [tenant, *rule]
    _keys("", None, relation, sql, params)
    sql.append("ORDER BY subject, relation, vt_from, object")
    return query(" ".join(sql), params)


def facts_of_subjects(query: Query, tenant: str, subjects: Sequence[str], *,
                      valid: datetime | None = None,
                      known: datetime | None = None) -> list[FactVersion]:
    """:func:`facts_table` for many subjects in one query (every relation), as versions."""
    if not subjects:
        return []
    now = datetime.now(UTC)
    where, params = asof.duckdb_sql(valid or now, known or now, asof.VERSIONS)
    sql = (f"WITH k AS MATERIALIZED (SELECT {VERSION_COLS} FROM fact_versions WHERE "
           f"subject IN (SELECT unnest(?::VARCHAR[]))) SELECT {VERSION_COLS} FROM k "
           f"WHERE tenant = ? AND {where} ORDER BY subject, relation, vt_from, object")
    return arrow.to_versions(query(sql, [list(subjects), tenant, *params]))


_HISTORY_ORDER = "relation, tt_from, tt_from_partition, tt_from_offset, vt_from, object"


def history(query: Query, tenant: str, subject: str, relation: str | None = None, *,
            known: Known | None = None) -> list[FactVersion]:
    """Every version of the subject's facts (both intervals), in transaction-time order per
    relation. With ``known``: as the timeline was known then, versions not yet seen left out
    and a close not yet known shown as open (the two halves of the rule's known clauses)."""
    if known is None:
        head, params = _source(subject)
        sql = [head, "WHERE tenant = ?"]
        params.append(tenant)
        _keys("", None, relation, sql, params)
        sql.append(f"ORDER BY {_HISTORY_ORDER}")
        return arrow.to_versions(query(" ".join(sql), params))
    seen, still_open = asof.known_clauses(known, asof.VERSIONS)
    seen_sql, seen_params = asof.duckdb_clauses([seen], alias="v.")
    open_sql, open_params = asof.duckdb_clauses([still_open], alias="v.")
    select = f"{_ALIASED}, NOT {open_sql} AS {_CLOSED}"
    if isinstance(known, LogCut):
        sql, params = _at_cut(tenant, known, subject, relation, select, open_params)
    else:  # the subject's versions by index, as _source
        sql = [f"{by_subject('fact_versions', VERSION_COLS)}SELECT {select} FROM k v "
               "WHERE v.tenant = ?"]
        params = [subject, *open_params, tenant]
        _keys("v.", None, relation, sql, params)
    order = ", ".join(f"v.{c.strip()}" for c in _HISTORY_ORDER.split(","))
    sql += [f"AND {seen_sql}", f"ORDER BY {order}"]
    table = query(" ".join(sql), [*params, *seen_params])
    closed = table.column(_CLOSED).to_pylist()
    return [v if shut or v.tt_to is None else v.reopened()
            for v, shut in zip(arrow.to_versions(table), closed, strict=True)]


def subject_versions(query: Query, tenant: str, subject: str) -> list[FactVersion]:
    """Every version of one subject of ``tenant``, any relation, any time, in no order (what
    a key index of the subject's facts holds; ``memstack.view.points``)."""
    head, params = _source(subject)
    return arrow.to_versions(query(f"{head} WHERE tenant = ?", [*params, tenant]))


def subject_entries(query: Query, tenant: str, subject: str) -> list[tuple[str, str, LogPosition]]:
    """``(event_id, relation, position)`` of every fact entry of one subject of ``tenant``,
    in transaction-time order (what a read at a log cut needs of a key index)."""
    table = query("SELECT event_id, relation, tt, tt_partition, tt_offset FROM fact_entries "
                  "WHERE tenant = ? AND subject = ? ORDER BY tt, tt_partition, tt_offset",
                  [tenant, subject])
    return [(r["event_id"], r["relation"],
             LogPosition(r["tt"].astimezone(UTC), r["tt_partition"], r["tt_offset"]))
            for r in table.to_pylist()]
