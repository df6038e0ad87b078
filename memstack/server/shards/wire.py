"""The JSON form of what crosses between a worker's shard API and the router.

Rows are the stores' frozen dataclasses (``RecordRow``, ``FactEntry``, ``MemoryRow``), dumped
and loaded with pydantic so times stay timezone-aware; as-of coordinates travel resolved (the
router fixes "now" once, so every shard answers at the same instant).
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any, TypeVar, cast

from pydantic import TypeAdapter

from memstack.view.types import AsOf, LogCut

T = TypeVar("T")


@cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def dump(value: Any, kind: Any) -> Any:
    """``value`` (of type ``kind``, e.g. ``list[RecordRow]``) as JSON-ready data."""
    return _adapter(kind).dump_python(value, mode="json")


def load(data: Any, kind: type[T]) -> T:
    loaded: T = _adapter(cast(Any, kind)).validate_python(data)
    return loaded


def as_of_json(as_of: AsOf) -> dict[str, Any]:
    cut = as_of.known_cut
    return {"valid": as_of.valid.isoformat(),
            "known": None if as_of.known_time is None else as_of.known_time.isoformat(),
            "cut": None if cut is None else [[p, o] for p, o in cut.offsets]}


def as_of_from(data: dict[str, Any]) -> AsOf:
    valid = datetime.fromisoformat(data["valid"])
    if data.get("cut") is not None:
        return AsOf(valid, LogCut.of({int(p): int(o) for p, o in data["cut"]}))
    return AsOf(valid, datetime.fromisoformat(data["known"]))
