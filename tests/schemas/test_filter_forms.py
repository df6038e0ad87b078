"""The metadata filter's three forms agree: on random metadata and random filters, real DuckDB
and real LanceDB running the rendered SQL select exactly the rows the Python form (the
reference, :func:`memstack.schemas.filters.matches`) selects; and each operator alone on a
fixed table selects what its definition says (docs/queries.md, "Filters").
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import duckdb
import lancedb
import pyarrow as pa
import pytest

from memstack.schemas.filter_sql import to_duckdb, to_lance
from memstack.schemas.filters import Filter, matches, parse_filter
from memstack.schemas.metadata import metadata_json
from memstack.schemas.rows import JSON_FIELD

VALUES: list[Any] = ["a", "b", "it's", 'q"\\', "ã", "", "3", "') OR TRUE OR ('", 3, 3.0, -1,
                     2.5, 10, 0, 1e20, -2**40, True, False, None]
KEYS = ["topic", "score", "tags", "lang"]
ROWS = 200
FILTERS = 150


def _value(rng: random.Random) -> Any:
    if rng.random() < 0.25:
        return [rng.choice(VALUES) for _ in range(rng.randrange(4))]
    return rng.choice(VALUES)


def _metadata(rng: random.Random) -> dict[str, Any]:
    return {k: _value(rng) for k in KEYS if rng.random() < 0.6}


def _leaf(rng: random.Random) -> dict[str, Any]:
    key = rng.choice(KEYS)
    op = rng.choice(["eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "contains", "short"])
    if op == "short":
        return {key: rng.choice(VALUES)}
    if op in ("in", "nin"):
        return {key: {op: rng.sample(VALUES, rng.randrange(1, 4))}}
    if op in ("gt", "gte", "lt", "lte"):
        return {key: {op: rng.choice([v for v in VALUES
                                      if isinstance(v, (int, float, str))
                                      and not isinstance(v, bool)])}}
    if op == "contains":
        return {key: {op: rng.choice([v for v in VALUES if v not in (2.5, 1e20)])}}
    return {key: {op: rng.choice(VALUES)}}


def _filter(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    roll = rng.random()
    if depth > 2 or roll < 0.45:
        return _leaf(rng)
    if roll < 0.65:
        return {"not": _filter(rng, depth + 1)}
    return {rng.choice(["and", "or"]): [_filter(rng, depth + 1)
                                        for _ in range(rng.randrange(1, 4))]}


def _tables(metas: list[dict[str, Any]], tmp_path: Path) -> tuple[Any, Any]:
    texts = [metadata_json(m) for m in metas]
    con = duckdb.connect()
    con.register("rows", pa.table({"id": list(range(len(texts))), "metadata_json": texts}))
    schema = pa.schema([pa.field("id", pa.int64()),
                        pa.field("metadata_json", pa.string(), metadata=JSON_FIELD)])
    lance = lancedb.connect(tmp_path / "lance").create_table(
        "rows", pa.table({"id": list(range(len(texts))), "metadata_json": texts}, schema=schema))
    return con, lance


def _selected(f: Filter, con: Any, lance: Any, n: int) -> tuple[set[int], set[int]]:
    where, params = to_duckdb(f)
    by_duckdb = {r[0] for r in con.execute(f"SELECT id FROM rows WHERE {where}",
                                           params).fetchall()}
    found = lance.search().where(to_lance(f), prefilter=True).select(["id"]).limit(n + 1)
    return by_duckdb, set(found.to_arrow().column("id").to_pylist())


def test_duckdb_lance_and_python_select_the_same_rows(tmp_path: Path) -> None:
    rng = random.Random(20261206)
    metas = [_metadata(rng) for _ in range(ROWS)]
    con, lance = _tables(metas, tmp_path)
    sizes = set()
    for _ in range(FILTERS):
        spec = _filter(rng)
        f = parse_filter(spec)
        expected = {i for i, m in enumerate(metas) if matches(f, m)}
        by_duckdb, by_lance = _selected(f, con, lance, ROWS)
        assert by_duckdb == expected, (json.dumps(spec), to_duckdb(f))
        assert by_lance == expected, (json.dumps(spec), to_lance(f))
        sizes.add(len(expected))
    assert len(sizes) > 20  # the filters select many different amounts, not all or nothing


FIXED = [
    {"topic": "a", "score": 3, "tags": ["x", 3, True], "lang": "en"},   # 0
    {"topic": "b", "score": 3.0, "tags": ["y"], "lang": "pt"},          # 1
    {"topic": "3", "score": 10, "tags": "x", "lang": None},             # 2
    {"topic": "it's", "score": -1},                                     # 3
    {},                                                                 # 4
    {"topic": ["a"], "score": True},                                    # 5
]
CASES: list[tuple[dict[str, Any], set[int]]] = [
    ({"topic": "a"}, {0}),                                  # eq shorthand: not the list ["a"]
    ({"score": {"eq": 3}}, {1, 0}),                         # 3 == 3.0, not True, not "3"
    ({"topic": {"eq": 3}}, set()),
    ({"lang": {"eq": None}}, {2}),                          # explicit null only
    ({"topic": {"ne": "a"}}, {1, 2, 3, 4, 5}),              # missing and lists are ne
    ({"lang": {"in": ["en", "pt"]}}, {0, 1}),
    ({"lang": {"nin": ["en", "pt"]}}, {2, 3, 4, 5}),
    ({"score": {"gt": 3}}, {2}),
    ({"score": {"gte": 3}}, {0, 1, 2}),                     # True is not a number
    ({"score": {"lt": 3}}, {3}),
    ({"score": {"lte": 3}}, {0, 1, 3}),
    ({"topic": {"gte": "b"}}, {1, 3}),                      # strings by code point
    ({"tags": {"contains": "x"}}, {0}),                     # a list holding it, not "x"
    ({"tags": {"contains": 3}}, {0}),
    ({"tags": {"contains": True}}, {0}),
    ({"score": {"gte": 0, "lt": 5}}, {0, 1}),               # several operators: all hold
    ({"and": [{"score": {"gte": 3}}, {"lang": "en"}]}, {0}),
    ({"or": [{"topic": "it's"}, {"lang": "pt"}]}, {1, 3}),
    ({"not": {"or": [{"topic": "it's"}, {"lang": "pt"}]}}, {0, 2, 4, 5}),
    ({}, {0, 1, 2, 3, 4, 5}),
]


@pytest.mark.parametrize(("spec", "expected"), CASES, ids=[json.dumps(c[0]) for c in CASES])
def test_each_operator_in_every_form(spec: dict[str, Any], expected: set[int],
                                     tmp_path: Path) -> None:
    f = parse_filter(spec)
    assert {i for i, m in enumerate(FIXED) if matches(f, m)} == expected
    con, lance = _tables(FIXED, tmp_path)
    assert _selected(f, con, lance, len(FIXED)) == (expected, expected)
