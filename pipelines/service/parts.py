"""What the HTTP app needs of the live worker it runs beside (``create_app(service=...)``)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from memstack.pipelines.service.changes import ChangeFeed
from memstack.pipelines.service.forgets import ForgetDesk
from memstack.pipelines.service.gate import ReadWriteGate
from memstack.pipelines.service.health import ServiceHealth
from memstack.pipelines.service.watch import AppliedWatch
from memstack.pipelines.service.writes import EventWriter, WriteLimits

DEFAULT_AFTER_TIMEOUT_S = 30.0


@dataclass
class LiveService:
    """The worker's applied position, its stores gate, the change feed, writes and forgets."""

    watch: AppliedWatch
    gate: ReadWriteGate
    feed: ChangeFeed
    writer: EventWriter
    forgets: ForgetDesk
    limits: WriteLimits = field(default_factory=WriteLimits)
    after_timeout_s: float = DEFAULT_AFTER_TIMEOUT_S
    """How long a read with ``after=`` waits before answering 504."""
    health: ServiceHealth | None = None
    """What ``/healthz`` and ``/readyz`` answer (None: always ok and ready)."""
    sealing_warning: str | None = None
    """Set when payloads are written unsealed (``MEMSTACK_SEAL=0``): ``/healthz``, the inspector
    and every forget answer report it (:attr:`Settings.sealing_warning`)."""
    session_state: Callable[[str, str], bytes | None] | None = None
    """A session's current state snapshot by ``(tenant, session)`` (None: no state kept)."""


class HealthView(Protocol):
    def healthz(self) -> dict[str, Any]: ...

    def readyz(self) -> dict[str, Any]: ...


class HealthSource(Protocol):
    def report(self) -> HealthView: ...


class ReadGate(Protocol):
    def reading(self, heavy: bool = False) -> AbstractContextManager[None]: ...


class ReadSide(Protocol):
    """What the read routes need of the process they run in: the writer's
    :class:`LiveService`, or a reader process's view of the published snapshots
    (``memstack serve --readers N``)."""

    @property
    def watch(self) -> AppliedWatch: ...

    @property
    def gate(self) -> ReadGate: ...

    @property
    def limits(self) -> WriteLimits: ...

    @property
    def after_timeout_s(self) -> float: ...

    @property
    def health(self) -> HealthSource | None: ...

    @property
    def sealing_warning(self) -> str | None: ...

    @property
    def session_state(self) -> Callable[[str, str], bytes | None] | None: ...
