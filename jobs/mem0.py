"""Mem0 exports as memstack events (``memstack import --format mem0 FILE --tenant T``).

Mem0's ``get_all`` / export answers a list of memories, each
``{"id", "memory", "user_id", "agent_id", "app_id", "run_id", "hash", "metadata",
"categories", "created_at", "updated_at"}`` (platform: ``{"count", "next", "results": [...]}``,
open source: ``{"results": [...]}``). Accepted here: that object, a bare list, or JSON Lines of
memories. Each memory becomes:

- a ``note`` with the memory's text, ``occurred_at`` = ``created_at``, subject ``user:<user_id>``
  (else ``agent:<agent_id>``), session = ``run_id`` (else ``mem0-<user or agent>``), agent =
  ``agent_id`` (else ``mem0``), provenance ``{"source": "mem0:<id>", "authority": "import"}``;
- one fact per ``metadata`` key ``(mem0:<id>, metadata.<key>, value)`` and one for
  ``categories``, valid from ``created_at``, so the metadata stays queryable.

Event ids are UUIDv7 made from ``created_at`` and a hash of the Mem0 id: importing the same
file twice yields the same ids, so the import's idempotence by event id holds for Mem0 too.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memstack.foundation.errors import MemstackError
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event, validate_event


class Mem0FormatError(MemstackError):
    """The file is not a Mem0 export: give get_all's JSON, a list of memories, or JSONL."""


def load_memories(path: Path) -> list[Any]:
    """The memories of a Mem0 export file (object with ``results``, list, or JSON Lines)."""
    text = path.read_text(encoding="utf-8")
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise Mem0FormatError(f"{path}: neither JSON nor JSON Lines ({exc})") from exc
    if isinstance(data, dict):
        data = data.get("results", data.get("memories"))
    if not isinstance(data, list):
        raise Mem0FormatError(f"{path}: expected Mem0's get_all answer ({{\"results\": [...]}})"
                              " or a list of memories")
    return data


def stable_id(created: datetime, *parts: str) -> str:
    """A UUIDv7 whose time is ``created`` and whose other bits hash ``parts``."""
    digest = int.from_bytes(hashlib.blake2b("\x1f".join(parts).encode(),
                                            digest_size=10).digest(), "big")
    ms = int(created.timestamp() * 1000) & ((1 << 48) - 1)
    value = ms << 80 | 0x7 << 76 | (digest & 0xFFF) << 64 | 0b10 << 62
    value |= (digest >> 12) & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def _time(memory: dict[str, Any], name: str, index: int) -> datetime | None:
    raw = memory.get(name)
    if raw in (None, ""):
        return None
    try:
        value = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidEventError(f"[{index}].{name}", f"not an ISO time: {raw!r}") from exc
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)  # naive: UTC


def memory_events(memory: Any, index: int, tenant: str) -> list[Event]:
    """The events of one Mem0 memory; raises :class:`InvalidEventError` naming the field."""
    if not isinstance(memory, dict):
        raise InvalidEventError(f"[{index}]", "a Mem0 memory must be a JSON object")
    mem_id, text = memory.get("id"), memory.get("memory")
    if not isinstance(mem_id, str) or not mem_id:
        raise InvalidEventError(f"[{index}].id", "required (the Mem0 memory id)")
    if not isinstance(text, str) or not text.strip():
        raise InvalidEventError(f"[{index}].memory", "required, non-empty text")
    created = _time(memory, "created_at", index) or _time(memory, "updated_at", index)
    if created is None:
        raise InvalidEventError(f"[{index}].created_at", "required (when Mem0 stored it)")
    user, agent, run = (memory.get(k) or None for k in ("user_id", "agent_id", "run_id"))
    subject = f"user:{user}" if user else (f"agent:{agent}" if agent else None)
    base = {"tenant": tenant, "agent": str(agent or "mem0"),
            "session": str(run or f"mem0-{user or agent or 'import'}"),
            "occurred_at": created,
            "provenance": {"source": f"mem0:{mem_id}"[:256], "authority": "import"}}
    events = [validate_event({**base, "event_id": stable_id(created, mem_id, "memory"),
                              "kind": "note", "payload": {"text": text},
                              **({"subject": subject} if subject else {})})]
    extra = dict(memory.get("metadata") or {})
    if memory.get("categories"):
        extra["categories"] = memory["categories"]
    for key, value in sorted(extra.items()):
        relation = "categories" if key == "categories" and key not in (
            memory.get("metadata") or {}) else f"metadata.{key}"
        obj = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        events.append(validate_event({
            **base, "event_id": stable_id(created, mem_id, relation), "kind": "fact_asserted",
            "subject": f"mem0:{mem_id}", "valid_from": created,
            "payload": {"relation": relation, "object": obj}}))
    return events


def mem0_events(memories: list[Any], tenant: str) -> tuple[list[Event], list[str]]:
    """Every memory's events, and one error line per memory that cannot be imported."""
    events: list[Event] = []
    errors: list[str] = []
    for index, memory in enumerate(memories):
        try:
            events.extend(memory_events(memory, index, tenant))
        except InvalidEventError as exc:
            errors.append(f"memory {index}: {exc}")
    return events, errors
