"""What one fault-injection history recorded: writes, reads, forgets and faults.

The workload threads append here as they go (under :attr:`History.lock`); the checker reads a
finished history. ``to_json`` is what a failing run prints so it can be replayed by seed and
read by a person: every fault with its timing, the counts, and the offending operations.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Write:
    """One acknowledged HTTP write: its events, their kinds and unique marker tokens."""

    tenant: str
    session: str
    event_ids: tuple[str, ...]
    kinds: tuple[str, ...]
    tokens: tuple[str, ...]
    position: str
    at: float
    doomed: bool = False
    """In a session the workload will forget (readers never expect it to stay)."""


@dataclass(frozen=True)
class Read:
    """One answered read with ``after=``: what it waited for and what it saw."""

    tenant: str
    route: str
    after: str
    expected: tuple[str, ...]
    """Event ids of the write this read waited for (must all be in the answer)."""
    seen_ids: tuple[str, ...]
    seen_tenants: tuple[str, ...]
    seen_tokens: tuple[str, ...]
    at: float


@dataclass(frozen=True)
class Forget:
    tenant: str
    session: str
    request_id: str
    position: str
    tokens: tuple[str, ...]
    event_ids: tuple[str, ...]
    at: float


@dataclass
class Fault:
    """One nemesis: when it struck, when it was healed, when the pipeline had caught up."""

    name: str
    injected_at: float
    healed_at: float | None = None
    caught_up_at: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def recovery_s(self) -> float | None:
        if self.healed_at is None or self.caught_up_at is None:
            return None
        return max(0.0, self.caught_up_at - self.healed_at)


@dataclass
class History:
    """Everything one history did; appended to by several threads."""

    seed: int
    writes: list[Write] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    forgets: list[Forget] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    unavailable: int = 0
    """Requests refused or unanswered while a fault was on (retried, not a correctness error)."""
    unsure_forgets: list[Write] = field(default_factory=list)
    """Doomed writes whose forget was sent but never answered before the workload stopped: the
    service may have logged it (indeterminate, as Jepsen calls it), so their events may be
    gone or present, and neither counts against the system."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, item: Write | Read | Forget) -> None:
        with self.lock:
            if isinstance(item, Write):
                self.writes.append(item)
            elif isinstance(item, Read):
                self.reads.append(item)
            else:
                self.forgets.append(item)

    def unsure(self, write: Write) -> None:
        with self.lock:
            self.unsure_forgets.append(write)

    def missed(self) -> None:
        with self.lock:
            self.unavailable += 1

    def to_json(self, problems: list[str] | None = None) -> str:
        """The history as a person reads it (counts, faults, problems), for a failing run."""
        body: dict[str, Any] = {
            "seed": self.seed, "writes": len(self.writes), "reads": len(self.reads),
            "forgets": [asdict(f) for f in self.forgets], "unavailable": self.unavailable,
            "unsure_forgets": [w.session for w in self.unsure_forgets],
            "faults": [asdict(f) | {"recovery_s": f.recovery_s} for f in self.faults],
            "problems": problems or []}
        return json.dumps(body, indent=1, default=str)
