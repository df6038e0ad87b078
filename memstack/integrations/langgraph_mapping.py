"""How LangGraph's store model maps onto memstack events and facts (pure, no I/O).

A LangGraph item is ``(namespace, key) -> value`` (a JSON object). In memstack:

- ``namespace = (tenant, subject)`` or ``(tenant, subject, label)``: the tenant of the service,
  the fact subject (``user:ana``), and an optional label (a session or a topic of the agent);
- the item lives in its own memstack **session** ``lg/<label>/<key>`` (``-`` when there is no
  label; label and key URL-quoted), and its value is the current value of the single-valued
  **fact** ``(subject, lg/<label>/<key>, <value JSON>)``: a second ``put`` supersedes the first
  in valid and transaction time, so history and as-of reads come from the fact index;
- for search, a ``put`` also writes a **note** (the value's text) in the same session; the
  fact's value names the note (``{"v": value, "n": note_event_id}``), so a search hit is kept
  only while its note belongs to the item's current value;
- ``delete`` is a forget request of the item's session: every version's fact and note are
  erased from every store (and crypto-shredded unless ``MEMSTACK_SEAL=0``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from memstack.foundation.errors import MemstackError
from memstack.foundation.log_coordinates import Position

PREFIX = "lg"
NO_LABEL = "-"


class NamespaceError(MemstackError, ValueError):
    """A namespace memstack cannot map: give ``(tenant, subject)`` or
    ``(tenant, subject, label)``."""


@dataclass(frozen=True)
class ItemAddress:
    """Where one LangGraph item lives in memstack."""

    tenant: str
    subject: str
    label: str | None
    key: str

    @property
    def namespace(self) -> tuple[str, ...]:
        base = (self.tenant, self.subject)
        return base if self.label is None else (*base, self.label)

    @property
    def session(self) -> str:
        """The item's memstack session, also its fact relation."""
        label = NO_LABEL if self.label is None else quote(self.label, safe="")
        return f"{PREFIX}/{label}/{quote(self.key, safe='')}"

    relation = session


def address(namespace: Sequence[str], key: str) -> ItemAddress:
    """The memstack address of ``(namespace, key)``; raises :class:`NamespaceError`."""
    if len(namespace) not in (2, 3):
        raise NamespaceError(
            f"namespace {tuple(namespace)} has {len(namespace)} labels; memstack maps "
            "(tenant, subject) or (tenant, subject, label)")
    if not key:
        raise NamespaceError("an item key must not be empty")
    return ItemAddress(namespace[0], namespace[1],
                       namespace[2] if len(namespace) == 3 else None, key)


def address_of(tenant: str, subject: str, relation: str) -> ItemAddress | None:
    """The item a fact relation (or session) belongs to; None when it is not an item's."""
    parts = relation.split("/")
    if len(parts) != 3 or parts[0] != PREFIX:
        return None
    label = None if parts[1] == NO_LABEL else unquote(parts[1])
    return ItemAddress(tenant, subject, label, unquote(parts[2]))


def encode_value(value: Mapping[str, Any], note_id: str | None) -> str:
    """The fact object of an item: its value and the note that indexes it for search."""
    return json.dumps({"v": value, "n": note_id}, sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"))


def decode_value(obj: str) -> tuple[dict[str, Any], str | None] | None:
    """``(value, note_id)`` of a fact object written by :func:`encode_value`, else None."""
    try:
        data = json.loads(obj)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("v"), dict):
        return None
    note = data.get("n")
    return data["v"], note if isinstance(note, str) else None


def index_text(value: Mapping[str, Any], fields: Sequence[str] | None) -> str:
    """The text a note indexes: the named fields (dotted paths) or every string in the value."""
    if fields is None or "$" in fields:
        return "\n".join(_strings(value)) or json.dumps(value, sort_keys=True)
    parts = [_text(_path(value, f)) for f in fields]
    return "\n".join(p for p in parts if p)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for k in sorted(value) for s in _strings(value[k])]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _path(value: Mapping[str, Any], path: str) -> Any:
    current: Any = value
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return None
        current = current[part]
    return current


_Compare = Callable[[Any, Any], bool]
_OPS: dict[str, _Compare] = {
    "$eq": lambda a, b: a == b, "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b, "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b, "$lte": lambda a, b: a is not None and a <= b,
}


def matches(value: Mapping[str, Any], conditions: Mapping[str, Any] | None) -> bool:
    """LangGraph's filter: exact values or ``{"$op": operand}`` per (dotted) field."""
    for field, wanted in (conditions or {}).items():
        actual = _path(value, field)
        if isinstance(wanted, Mapping) and wanted and all(k in _OPS for k in wanted):
            try:
                if not all(_OPS[op](actual, operand) for op, operand in wanted.items()):
                    return False
            except TypeError:
                return False
        elif actual != wanted:
            return False
    return True


def namespace_matches(namespace: tuple[str, ...], match_type: str,
                      path: Sequence[str]) -> bool:
    """LangGraph's namespace match condition (``*`` matches any one label)."""
    if len(path) > len(namespace):
        return False
    part = namespace[:len(path)] if match_type == "prefix" else namespace[-len(path):]
    return all(p in ("*", n) for p, n in zip(path, part, strict=True)) if path else True


def merge_positions(a: str | None, b: str | None) -> str | None:
    """Two position tokens as one (the larger next offset per partition; docs/service.md)."""
    return Position.merge_tokens(a, b)
