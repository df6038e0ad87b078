"""The forget interface every store implements: :class:`Forgettable`.

``forget(targets)`` erases the targets of one resolved request, logically *and* physically (no
old version, free page or index entry keeps them); ``residuals(probe)`` says what of them a
reader could still find there. DuckDB and LanceDB implement it here and also split it in two
(:class:`TwoPhase`), so the live worker hides a request at once and a background eraser removes
the bytes; the session-state and consolidation stores implement it in their own packages and
run the shared contract suite ``tests/forget/contract.py`` (see docs/forget.md, "Adding a
store").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from memstack.operators.forget import ForgetRequest, Tombstones

Vectors = npt.NDArray[np.float32]

MIN_PROBE_BYTES = 12
"""Texts shorter than this are not searched for as raw bytes (they match by chance)."""


@dataclass(frozen=True)
class ForgetReport:
    """What one store did for one request."""

    store: str
    deleted: dict[str, int] = field(default_factory=dict)
    """Rows deleted per table (logical)."""
    physical: dict[str, float] = field(default_factory=dict)
    """Physical steps and their measurements (e.g. ``checkpoint_clean``, ``compacted``, ``s``)."""


def erased_then_purged(store: str, targets: Tombstones,
                       erase: Callable[[Tombstones], dict[str, int]],
                       purge: Callable[[], dict[str, float]]) -> ForgetReport:
    """The one-call ``forget`` of a two-phase store: its erase, then its purge, timed together
    (``physical["s"]``)."""
    began = time.monotonic()
    deleted = erase(targets)
    physical = purge()
    physical["s"] = time.monotonic() - began
    return ForgetReport(store, deleted, physical)


@dataclass(frozen=True)
class Residual:
    """Something of a forgotten scope a reader can still get at, in one store."""

    store: str
    check: str
    """``rows``, ``exact_text``, ``near_duplicate``, ``as_of``, ``old_versions``, ``log``, ..."""
    count: int
    detail: str = ""


@dataclass(frozen=True)
class AuditProbe:
    """What the audit looks for: the forgotten ids, and (held in memory only) their content.

    ``texts`` are the forgotten texts that no surviving row also holds (a text another,
    unforgotten event says too is not a residual); ``vectors`` embed them; ``known_times`` are
    the transaction times at which the forgotten rows were known (for as-of queries).
    """

    request: ForgetRequest
    event_ids: frozenset[str]
    texts: tuple[str, ...] = ()
    vectors: Vectors | None = None
    known_times: tuple[datetime, ...] = ()
    near_duplicate_similarity: float = 0.95

    @classmethod
    def of(cls, targets: Tombstones, shared: frozenset[str] = frozenset(),
           vectors: Vectors | None = None,
           known_times: tuple[datetime, ...] = ()) -> AuditProbe:
        texts = tuple(t for t in targets.texts if t not in shared)
        return cls(targets.request, targets.event_ids, texts, vectors, known_times)

    @property
    def byte_probes(self) -> list[bytes]:
        """The texts as searched for in files: UTF-8, long enough to be meaningful."""
        out: list[bytes] = []
        for text in self.texts:
            for form in (text, json.dumps(text, ensure_ascii=False)[1:-1]):
                raw = form.encode()
                if len(raw) >= MIN_PROBE_BYTES and raw not in out:
                    out.append(raw)
        return out


class Forgettable(Protocol):
    """A store that can forget: erase resolved targets and report residuals."""

    @property
    def name(self) -> str: ...

    def forget(self, targets: Tombstones) -> ForgetReport:
        """Erase ``targets`` for good (rows, derived rows, indexes, old versions, free pages)."""
        ...

    def residuals(self, probe: AuditProbe) -> list[Residual]:
        """Every way the probe's content is still readable here (empty: forgotten)."""
        ...


@runtime_checkable
class TwoPhase(Protocol):
    """A :class:`Forgettable` that forgets in two phases, each bounded: :meth:`erase` hides the
    targets at once (no read returns them), :meth:`purge` later removes their bytes from every
    file, index and old version, for every request erased since the last purge in one pass.
    ``forget`` is ``erase`` then ``purge``. ``purge`` must hold without ``probes`` (after a
    restart the content is no longer known): what ``erase`` left on disk says what to remove."""

    def erase(self, targets: Tombstones) -> dict[str, int]:
        """Hide ``targets`` (rows deleted per table); cheap, on the writer's thread."""
        ...

    def erase_all(self, batch: Sequence[Tombstones]) -> list[dict[str, int]]:
        """Hide the targets of several requests at once (their event ids and fact keys
        disjoint, so the order among them does not matter); per request, its rows deleted
        per table. The cost of one :meth:`erase`, not of ``len(batch)``."""
        ...

    def purge(self, probes: Sequence[bytes] = (),
              exclusive: Callable[[], AbstractContextManager[None]] = nullcontext,
              ) -> dict[str, float]:
        """Remove the bytes of everything erased so far; ``probes`` (the forgotten texts as
        bytes, possibly empty) may be used to check it. The steps that readers or the
        logical phase must not overlap run inside ``exclusive()``. Figures: seconds per step,
        ``s``."""
        ...


@runtime_checkable
class ForgetsFirst(Forgettable, Protocol):
    """A :class:`Forgettable` whose ``forget`` reads rows that other stores erase (the session
    state rebuilds a forgotten event's term from its stored text and log position): the
    processor runs it before them (``forgets_first = True``). Its forget must be idempotent: a
    retry after a crash finds those rows gone and must change nothing more."""

    forgets_first: bool

    def forget_all(self, batch: Sequence[Tombstones]) -> list[ForgetReport]:
        """:meth:`Forgettable.forget` of each request of ``batch`` in order, as if the other
        stores had erased the earlier ones (they erase the whole batch afterwards)."""
        ...


def files_containing(paths: list[str], probes: list[bytes]) -> dict[str, int]:
    """For each file, how many of ``probes`` occur in its bytes (files with none left out)."""
    hits: dict[str, int] = {}
    if not probes:
        return hits
    for path in paths:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            continue  # removed while scanning (a cleanup): nothing left to read
        found = sum(1 for p in probes if p in data)
        if found:
            hits[path] = found
    return hits
