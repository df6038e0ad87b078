"""The phases of a forget request and their record: logged -> invisible -> erased -> audited.

- **logged**: the request is on ``<prefix>.forget`` (its broker append time);
- **invisible**: every store committed the logical erasure (no read returns the content);
- **erased**: the bytes are gone from every store's files, indexes and old versions;
- **audited**: the audit ran (``passed`` says how it went).

:class:`ForgetStatus` is persisted as ``<home>/forget/<request_id>.json`` at each phase (ids,
counts and times only, never forgotten content); :func:`read_status` reads it back for
``memstack forget audit`` and the service's forget status.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PHASES = ("logged", "invisible", "erased", "audited")


@dataclass
class ForgetStatus:
    """Where one request stands: the time each phase was reached (UTC)."""

    request_id: str
    scope: str
    reached: dict[str, datetime] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    """Ids-and-counts summary of the outcome, once audited."""

    @property
    def phase(self) -> str:
        return next((p for p in reversed(PHASES) if p in self.reached), "logged")

    def reach(self, phase: str, at: datetime | None = None) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown forget phase {phase!r}; one of {PHASES}")
        self.reached[phase] = at or datetime.now(UTC)

    def seconds(self) -> dict[str, float]:
        """Seconds from ``logged`` to each later phase reached."""
        start = self.reached.get("logged")
        if start is None:
            return {}
        return {p: (t - start).total_seconds() for p, t in self.reached.items() if p != "logged"}

    def to_dict(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "scope": self.scope, "phase": self.phase,
                "phases": {p: t.isoformat() for p, t in self.reached.items()},
                "phase_seconds": self.seconds(), **self.facts}

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> ForgetStatus:
        reached = {p: datetime.fromisoformat(t) for p, t in body.get("phases", {}).items()}
        facts = {k: v for k, v in body.items()
                 if k not in ("request_id", "scope", "phase", "phases", "phase_seconds")}
        return cls(str(body["request_id"]), str(body.get("scope", "")), reached, facts)

    def save(self, directory: Path | None) -> None:
        if directory is None:
            return
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.request_id}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, default=str))
        os.replace(tmp, path)


def read_status(directory: Path, request_id: str) -> ForgetStatus | None:
    """The recorded status of ``request_id`` under ``directory`` (None: never processed)."""
    path = directory / f"{request_id}.json"
    if not path.exists():
        return None
    return ForgetStatus.from_dict(json.loads(path.read_text()))
