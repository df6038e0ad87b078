"""The metadata filter language, defined once: its syntax, its meaning, and a Python form.

A filter is a JSON object; each key is a metadata key (a *field*, :data:`KEY_PATTERN`) or one
of ``and``, ``or``, ``not``; several keys in one object must all hold::

    {"topic": "billing"}                              eq shorthand
    {"score": {"gte": 3, "lt": 9}}                    several operators on one field: all hold
    {"lang": {"in": ["en", "pt"]}}
    {"tags": {"contains": "urgent"}}
    {"or": [{"topic": "billing"}, {"not": {"lang": "en"}}]}

Meaning, on a row's metadata (the Python form, :func:`matches`, is the reference that the
DuckDB and LanceDB forms of :mod:`memstack.schemas.filter_sql` are tested against on real
stores):

- ``eq v``: the field holds the scalar ``v``, of the same JSON type (numbers compare as
  numbers: 3 equals 3.0; ``"3"`` is not 3; a list never equals a scalar: use ``contains``);
  ``eq null`` holds for an explicit null, not for a missing field;
- ``ne v``: not ``eq v`` (a missing field is ``ne`` anything);
- ``in [a, b]``: ``eq`` one of them; ``nin``: not ``in``;
- ``gt``/``gte``/``lt``/``lte`` ``v``: ``v`` a number or a string; the field holds a scalar of
  the same kind that compares so (strings by code point, as their UTF-8 bytes);
- ``contains v``: the field holds a list with an item ``eq v`` (``v`` not a fraction: LanceDB's
  JSONPath reads integer literals only);
- ``and``/``or``: a non-empty list of filters; ``not``: one filter. ``{}`` keeps every row.

A bad filter raises :class:`FilterError` naming the field and the operator.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from memstack.foundation.errors import MemstackError
from memstack.schemas.metadata import KEY_PATTERN, Metadata, check_key, is_scalar
from memstack.schemas.metadata import Scalar as Scalar  # re-exported for the forms

Op = Literal["eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "contains"]
OPS: tuple[Op, ...] = ("eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "contains")
ORDERED: frozenset[str] = frozenset({"gt", "gte", "lt", "lte"})
LOGIC = ("and", "or", "not")
MAX_CONDITIONS = 64
"""The most comparisons one filter may hold (``in`` counts its values)."""
MAX_DEPTH = 8
"""The deepest nesting of ``and``/``or``/``not``."""
MAX_TEXT = 8192
"""The longest filter as JSON text (an HTTP query parameter)."""


class FilterError(MemstackError, ValueError):
    """A filter that cannot be read: ``field`` and ``op`` say where (``$`` for the whole)."""

    def __init__(self, field: str, op: str, rule: str) -> None:
        self.field, self.op, self.rule = field, op, rule
        where = f"'{op}' on '{field}'" if op else f"'{field}'"
        super().__init__(f"filter: {where} {rule}")


@dataclass(frozen=True)
class Compare:
    """``field op value``: ``value`` a scalar, or a tuple of scalars for ``in``/``nin``."""

    field: str
    op: Op
    value: Scalar | tuple[Scalar, ...]


@dataclass(frozen=True)
class And:
    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Not:
    part: Filter


Filter = Compare | And | Or | Not

EVERYTHING = And(())
"""The filter ``{}``: keeps every row."""


def parse_filter(data: Any) -> Filter:
    """A filter from its JSON form: an object, or its text (raises :class:`FilterError`)."""
    if isinstance(data, (str, bytes)):
        if len(data) > MAX_TEXT:
            raise FilterError("$", "", f"is {len(data)} characters; at most {MAX_TEXT}")
        try:
            data = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise FilterError("$", "", f"is not JSON: {exc}") from None
    parsed = _node(data, 0)
    count = conditions(parsed)
    if count > MAX_CONDITIONS:
        raise FilterError("$", "", f"holds {count} conditions; at most {MAX_CONDITIONS}")
    return parsed


def conditions(f: Filter) -> int:
    if isinstance(f, Compare):
        return len(f.value) if isinstance(f.value, tuple) else 1
    if isinstance(f, Not):
        return conditions(f.part)
    return sum(conditions(p) for p in f.parts)


def _node(data: Any, depth: int) -> Filter:
    if depth > MAX_DEPTH:
        raise FilterError("$", "", f"nests deeper than {MAX_DEPTH} levels")
    if not isinstance(data, Mapping):
        raise FilterError("$", "", f"must be a JSON object, got {_kind(data)}")
    parts: list[Filter] = []
    for key, value in data.items():
        if key in ("and", "or"):
            if not isinstance(value, list) or not value:
                raise FilterError("$", key, "needs a non-empty list of filters")
            nodes = tuple(_node(v, depth + 1) for v in value)
            parts.append(And(nodes) if key == "and" else Or(nodes))
        elif key == "not":
            parts.append(Not(_node(value, depth + 1)))
        else:
            parts.extend(_field(key, value))
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def _field(key: Any, spec: Any) -> list[Filter]:
    try:
        field = check_key(key)
    except ValueError:
        raise FilterError(str(key), "", f"is not a metadata key: it must match {KEY_PATTERN} "
                          f"or be one of {', '.join(LOGIC)}") from None
    if not isinstance(spec, Mapping):
        if isinstance(spec, list):
            raise FilterError(field, "eq", "needs a scalar; for one of several values use "
                              '{"in": [...]}, for a list holding a value {"contains": ...}')
        return [_compare(field, "eq", spec)]
    if not spec:
        raise FilterError(field, "", f"needs at least one operator ({', '.join(OPS)})")
    return [_compare(field, op, value) for op, value in spec.items()]


def _compare(field: str, op: Any, value: Any) -> Compare:
    if op not in OPS:
        raise FilterError(field, str(op), f"is not an operator; use one of {', '.join(OPS)}")
    if op in ("in", "nin"):
        if not isinstance(value, list) or not value:
            raise FilterError(field, op, "needs a non-empty list of scalars")
        for item in value:
            _scalar(field, op, item)
        return Compare(field, op, tuple(value))
    _scalar(field, op, value)
    if op == "contains" and isinstance(value, (int, float)) and not isinstance(value, bool) \
            and (not float(value).is_integer() or abs(value) >= 2**63):
        raise FilterError(field, op, "takes a string, an integer below 2**63 in size, a bool "
                          "or null (LanceDB's JSONPath reads no fractions), got "
                          f"{'a fraction' if not float(value).is_integer() else 'a larger number'}")
    if op in ORDERED and (value is None or isinstance(value, bool)):
        raise FilterError(field, op, f"needs a number or a string, got {_kind(value)}")
    return Compare(field, op, value)


def _scalar(field: str, op: str, value: Any) -> None:
    if not is_scalar(value):
        raise FilterError(field, op, "needs a string, a finite number, a bool or null, got "
                          f"{_kind(value)}")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", bool: "a bool", type(None): "null",
            str: "a string"}.get(type(value), type(value).__name__)


# -- the Python form: the reference ------------------------------------------------------------

_MISSING = object()


def same(a: object, b: object) -> bool:
    """``eq`` on two scalars: the same JSON type and equal (numbers as numbers)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if a is None or b is None:
        return a is None and b is None
    return isinstance(a, str) and isinstance(b, str) and a == b


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_ORDER = {"gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le}


def _ordered(value: object, op: str, bound: object) -> bool:
    """Numbers compare as 64-bit floats (as both stores compare them); strings by code point."""
    if _is_number(value) and _is_number(bound):
        return bool(_ORDER[op](float(value), float(bound)))  # type: ignore[arg-type]  # numbers
    if isinstance(value, str) and isinstance(bound, str):
        return bool(_ORDER[op](value, bound))
    return False


def _holds(c: Compare, value: object) -> bool:
    scalar = value is not _MISSING and not isinstance(value, list)
    if c.op in ("eq", "ne"):
        return (scalar and same(value, c.value)) == (c.op == "eq")
    if c.op in ("in", "nin"):
        found = scalar and any(same(value, v) for v in c.value)  # type: ignore[union-attr]
        return found == (c.op == "in")
    if c.op == "contains":
        return isinstance(value, list) and any(same(item, c.value) for item in value)
    return scalar and _ordered(value, c.op, c.value)


def matches(f: Filter, metadata: Metadata) -> bool:
    """Whether a row with ``metadata`` passes ``f``."""
    if isinstance(f, Compare):
        return _holds(f, metadata.get(f.field, _MISSING))
    if isinstance(f, Not):
        return not matches(f.part, metadata)
    if isinstance(f, And):
        return all(matches(p, metadata) for p in f.parts)
    return any(matches(p, metadata) for p in f.parts)


def to_json(f: Filter) -> dict[str, Any]:
    """The JSON form of ``f`` (``parse_filter(to_json(f)) == f`` up to ``and`` flattening)."""
    if isinstance(f, Compare):
        value = list(f.value) if isinstance(f.value, tuple) else f.value
        return {f.field: {f.op: value}}
    if isinstance(f, Not):
        return {"not": to_json(f.part)}
    if isinstance(f, And):
        return {"and": [to_json(p) for p in f.parts]} if f.parts else {}
    return {"or": [to_json(p) for p in f.parts]}
