"""A forget request's phases: logged -> invisible -> erased -> audited, each with its time.

- ``logged``: the broker acknowledged the request on ``<prefix>.forget`` (its log time).
- ``invisible``: the worker committed the logical deletion (Lance deletion files, DuckDB rows
  blanked and deleted in one transaction, the data keys destroyed): no read returns the
  content, but bytes may still sit in data files, index files and old versions.
- ``erased``: the background eraser removed those bytes (only the fragments and row groups
  that held them are rewritten; see docs/forget.md).
- ``audited``: the audit searched every store for what is left; ``passed`` says what it found.

The record is persisted without content (ids, counts, times) under
``<home>/forget/<request_id>.json``; the service's forget status and ``memstack forget
status`` read it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

PHASES = ("logged", "invisible", "erased", "audited")


@dataclass(frozen=True)
class Phases:
    """When a request reached each phase (wall-clock, UTC); absent: not yet."""

    times: Mapping[str, datetime] = field(default_factory=dict)

    @classmethod
    def logged_at(cls, log_time: datetime) -> Self:
        return cls({"logged": log_time})

    def reached(self, phase: str, at: datetime | None = None) -> Phases:
        if phase not in PHASES:
            raise ValueError(f"unknown forget phase {phase!r}; one of {', '.join(PHASES)}")
        return replace(self, times={**self.times, phase: at or datetime.now(UTC)})

    @property
    def current(self) -> str:
        """The furthest phase reached."""
        return max(self.times, key=PHASES.index, default="logged")

    def seconds_since_logged(self) -> dict[str, float]:
        """Per phase reached, seconds from the request's log time."""
        logged = self.times.get("logged")
        if logged is None:
            return {}
        return {p: round((t - logged).total_seconds(), 6) for p, t in self.times.items()
                if p != "logged"}

    def to_json(self) -> dict[str, Any]:
        return {"status": self.current,
                "phases": {p: self.times[p].isoformat() for p in PHASES if p in self.times},
                "phase_seconds": self.seconds_since_logged()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        raw = data.get("phases") or {}
        return cls({p: datetime.fromisoformat(str(raw[p])) for p in PHASES if p in raw})


def write_status(directory: Path | None, request_id: str, body: Mapping[str, Any]) -> None:
    """Replace ``<directory>/<request_id>.json`` atomically (nothing when no directory)."""
    if directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{request_id}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(dict(body), indent=2, default=str))
    os.replace(tmp, path)


def read_status(directory: Path, request_id: str) -> dict[str, Any] | None:
    """The persisted record of a request, or None when there is none (yet)."""
    try:
        data: dict[str, Any] = json.loads((directory / f"{request_id}.json").read_text())
    except (OSError, ValueError):
        return None
    return data
