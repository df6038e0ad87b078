"""The metadata filter (:mod:`memstack.schemas.filters`) rendered for DuckDB and for LanceDB.

Both read the row's ``metadata_json`` column, so a filter is a prefilter next to the tenant,
scope and as-of clauses, inside the store:

- **DuckDB** (a ``VARCHAR`` of JSON text): the ``json`` extension's ``json_type`` guards the
  JSON type and ``json_extract``/``json_extract_string`` read the value; every value is a
  bound parameter (``?``), and a field is a metadata key (``^[A-Za-z_][A-Za-z0-9_]*$``, checked
  by the parser), so the path ``'$.key'`` needs no escaping.
- **LanceDB** (the column is stored as JSONB, ``lance.json``): a string, bool or null is
  compared by ``json_exists(col, '$.key ? (@ == literal)')``, a SQL/JSONPath predicate on the
  typed JSONB value (``"3"`` is not 3, strings order by code point); JSONPath unwraps lists,
  so the guard ``json_extract(col, '$.key') LIKE '[%'`` (a list's JSON text starts with
  ``[``, a string's with ``"``) keeps those to scalars and ``contains`` to lists. A number is
  compared as ``TRY_CAST(json_extract(col, '$.key') AS DOUBLE) op number`` (the JSON text of a
  string, bool or list does not cast: false), as DuckDB compares it, because pylance 14's
  JSONPath reads integer literals only; for the same reason ``contains`` takes integers but
  no fractions (the parser refuses them). LanceDB's SQL takes no parameters: a string is
  written as a JSON string literal (``json.dumps``, ASCII, so quotes, backslashes and control
  characters are escaped) inside a SQL string literal (``'`` doubled).

Every comparison is wrapped in ``COALESCE(..., FALSE)``, so a missing field or a row without
metadata is false, never SQL NULL, and ``not`` means exactly "does not match" as in Python.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from memstack.schemas.filters import And, Compare, Filter, Not, Or, Scalar

COLUMN = "metadata_json"
NUMBER_TYPES = "('BIGINT', 'UBIGINT', 'DOUBLE')"
_SQL_OP = {"eq": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_PATH_OP = {"eq": "==", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def _positive(f: Compare) -> Compare:
    """``ne``/``nin`` as the ``eq``/``in`` they negate."""
    return Compare(f.field, "eq" if f.op == "ne" else "in", f.value)


def _render(f: Filter, leaf: Callable[[Compare], str]) -> str:
    """``f`` as SQL, the boolean structure (``not``, ``and``, ``or``, and ``ne``/``nin``/``in``
    spelt with ``not``/``or`` of ``eq``) rendered here once for both dialects, each comparison
    left (``eq``, ``gt``, ``gte``, ``lt``, ``lte``, ``contains``) by ``leaf``, in order."""
    if isinstance(f, Not):
        return f"(NOT {_render(f.part, leaf)})"
    if isinstance(f, And | Or):
        if not f.parts:
            return "TRUE"
        joint = " AND " if isinstance(f, And) else " OR "
        return "(" + joint.join(_render(p, leaf) for p in f.parts) + ")"
    if f.op in ("ne", "nin"):
        return f"(NOT {_render(_positive(f), leaf)})"
    if f.op == "in":
        values = f.value if isinstance(f.value, tuple) else (f.value,)
        return "(" + " OR ".join(leaf(Compare(f.field, "eq", v)) for v in values) + ")"
    return leaf(f)


# -- DuckDB -------------------------------------------------------------------------------------

def to_duckdb(f: Filter, column: str = COLUMN) -> tuple[str, list[Any]]:
    """``f`` as a DuckDB boolean expression over ``column`` and its parameters, in order."""
    params: list[Any] = []
    return _duck(f, column, params), params


def _duck(f: Filter, col: str, params: list[Any]) -> str:
    return _render(f, lambda c: _duck_compare(c, col, params))


def _duck_compare(f: Compare, col: str, params: list[Any]) -> str:
    path = f"'$.{f.field}'"
    if f.op == "contains":
        test = _duck_scalar("x", "'$'", "=", f.value, params)
        return (f"COALESCE(json_type({col}, {path}) = 'ARRAY' AND len(list_filter("
                f"json_extract({col}, '$.{f.field}[*]'), lambda x: {test})) > 0, FALSE)")
    return f"COALESCE({_duck_scalar(col, path, _SQL_OP[f.op], f.value, params)}, FALSE)"


def _duck_scalar(doc: str, path: str, op: str, value: Scalar | tuple[Scalar, ...],
                 params: list[Any]) -> str:
    """``doc``'s value at ``path`` is a scalar of ``value``'s JSON type and ``op value``."""
    kind = f"json_type({doc}, {path})"
    if value is None:
        return f"({kind} = 'NULL')"
    params.append(value)
    if isinstance(value, bool):
        return f"({kind} = 'BOOLEAN' AND TRY_CAST(json_extract({doc}, {path}) AS BOOLEAN) {op} ?)"
    if isinstance(value, (int, float)):
        return (f"({kind} IN {NUMBER_TYPES} AND "
                f"TRY_CAST(json_extract({doc}, {path}) AS DOUBLE) {op} ?)")
    return f"({kind} = 'VARCHAR' AND json_extract_string({doc}, {path}) {op} ?)"


# -- LanceDB ------------------------------------------------------------------------------------

def to_lance(f: Filter, column: str = COLUMN) -> str:
    """``f`` as a LanceDB (DataFusion) SQL boolean expression over ``column``."""
    return _render(f, lambda c: _lance_compare(c, column))


def _lance_compare(f: Compare, column: str) -> str:
    extracted = f"json_extract({column}, '$.{f.field}')"
    if f.value == "":
        return f"COALESCE({_empty_string(f.op, extracted)}, FALSE)"
    if f.op == "contains":
        path = f"$.{f.field}[*] ? (@ == {_literal(f.value)})"
        return (f"COALESCE(json_exists({column}, {_sql_string(path)}) AND {extracted} LIKE '[%', "
                "FALSE)")
    if isinstance(f.value, (int, float)) and not isinstance(f.value, bool):
        return (f"COALESCE(TRY_CAST({extracted} AS DOUBLE) {_SQL_OP[f.op]} "
                f"CAST('{float(f.value)!r}' AS DOUBLE), FALSE)")
    path = f"$.{f.field} ? (@ {_PATH_OP[f.op]} {_literal(f.value)})"
    return (f"COALESCE(json_exists({column}, {_sql_string(path)}) AND NOT ({extracted} LIKE '[%'), "
            "FALSE)")


def _empty_string(op: str, extracted: str) -> str:
    """A comparison with ``""``, which pylance 14's JSONPath cannot write, on the value's
    compact JSON text: a string's starts with ``"``, the empty string's is ``""``, and in a
    flat list's text ``[""`` or ``,""`` can only be an empty string item (a ``"`` inside a
    string is escaped)."""
    is_string = f"{extracted} LIKE '\"%'"
    return {
        "eq": f"{extracted} = '\"\"'",
        "lte": f"{extracted} = '\"\"'",
        "lt": "FALSE",
        "gte": is_string,
        "gt": f"{is_string} AND {extracted} <> '\"\"'",
        "contains": (f"{extracted} LIKE '[%' AND ({extracted} LIKE '[\"\"%' OR {extracted} "
                     "LIKE '%,\"\"%')"),
    }[op]


def _literal(value: Scalar | tuple[Scalar, ...]) -> str:
    """A JSONPath literal of a scalar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):  # JSONPath: integers only (the parser refuses fractions)
        return str(int(value)) if value.is_integer() else format(Decimal(repr(value)), "f")
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=True)
    raise TypeError(f"not a scalar: {value!r}")


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
