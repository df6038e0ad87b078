"""The filter language's parser: what it reads, and every refusal naming the field and the
operator (the forms' agreement on real stores is tests/schemas/test_filter_forms.py)."""

from __future__ import annotations

from typing import Any

import pytest

from memstack.schemas.filter_sql import to_duckdb, to_lance
from memstack.schemas.filters import (
    EVERYTHING,
    MAX_CONDITIONS,
    MAX_DEPTH,
    And,
    Compare,
    FilterError,
    Not,
    Or,
    matches,
    parse_filter,
    to_json,
)


def test_the_syntax_reads_into_the_tree() -> None:
    assert parse_filter({"topic": "x"}) == Compare("topic", "eq", "x")
    assert parse_filter('{"score": {"gte": 3, "lt": 9}}') == And(
        (Compare("score", "gte", 3), Compare("score", "lt", 9)))
    assert parse_filter({"lang": {"in": ["en", "pt"]}}) == Compare("lang", "in", ("en", "pt"))
    assert parse_filter({"or": [{"a": 1}, {"not": {"b": None}}]}) == Or(
        (Compare("a", "eq", 1), Not(Compare("b", "eq", None))))
    assert parse_filter({}) == EVERYTHING and matches(EVERYTHING, {})
    spec = {"and": [{"a": {"contains": "x"}}, {"or": [{"b": {"nin": [1, 2]}}, {"c": True}]}]}
    assert parse_filter(to_json(parse_filter(spec))) == parse_filter(spec)


@pytest.mark.parametrize(("spec", "field", "op", "words"), [
    ({"score": {"gte": True}}, "score", "gte", "needs a number or a string, got a bool"),
    ({"score": {"lt": None}}, "score", "lt", "needs a number or a string, got null"),
    ({"score": {"gt": [1]}}, "score", "gt", "got a list"),
    ({"topic": {"eq": {"x": 1}}}, "topic", "eq", "got an object"),
    ({"topic": {"ne": [1]}}, "topic", "ne", "got a list"),
    ({"lang": {"in": []}}, "lang", "in", "needs a non-empty list of scalars"),
    ({"lang": {"nin": "en"}}, "lang", "nin", "needs a non-empty list of scalars"),
    ({"lang": {"in": [["en"]]}}, "lang", "in", "got a list"),
    ({"tags": {"contains": 2.5}}, "tags", "contains", "got a fraction"),
    ({"tags": {"contains": ["a"]}}, "tags", "contains", "got a list"),
    ({"tags": ["a", "b"]}, "tags", "eq", '{"in": [...]}'),
    ({"topic": {"near": "x"}}, "topic", "near", "is not an operator; use one of eq, ne"),
    ({"topic": {}}, "topic", "", "needs at least one operator"),
    ({"bad key": 1}, "bad key", "", "is not a metadata key"),
    ({"and": []}, "$", "and", "needs a non-empty list of filters"),
    ({"or": {"a": 1}}, "$", "or", "needs a non-empty list of filters"),
    ({"not": [{"a": 1}]}, "$", "", "must be a JSON object, got a list"),
    ("[1, 2]", "$", "", "must be a JSON object"),
    ("{broken", "$", "", "is not JSON"),
    ({"score": {"eq": float("nan")}}, "score", "eq", "finite number"),
])
def test_every_refusal_names_field_and_operator(spec: Any, field: str, op: str,
                                                words: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse_filter(spec)
    assert (caught.value.field, caught.value.op) == (field, op)
    assert words in str(caught.value), str(caught.value)
    named = f"'{op}' on '{field}'" if op else f"'{field}'"
    assert str(caught.value).startswith(f"filter: {named}")


def test_filters_are_bounded() -> None:
    deep: dict[str, Any] = {"a": 1}
    for _ in range(MAX_DEPTH + 1):
        deep = {"not": deep}
    with pytest.raises(FilterError, match="nests deeper"):
        parse_filter(deep)
    with pytest.raises(FilterError, match=f"at most {MAX_CONDITIONS}"):
        parse_filter({"a": {"in": list(range(MAX_CONDITIONS + 1))}})
    with pytest.raises(FilterError, match="characters"):
        parse_filter('{"a": "' + "x" * 9000 + '"}')


def test_values_never_reach_the_sql_as_text() -> None:
    hostile = "x') OR TRUE OR ('"
    where, params = to_duckdb(parse_filter({"topic": hostile}))
    assert hostile not in where and params == [hostile]  # DuckDB: a bound parameter
    lance = to_lance(parse_filter({"topic": hostile}))
    assert "x'') OR TRUE OR (''" in lance  # LanceDB: quoted inside the string literal
