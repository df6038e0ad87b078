"""The running service moves to other stores when ``stores/current`` points elsewhere.

``memstack stores switch DIR`` (and ``memstack reindex``, which ends with it) replaces the
pointer atomically; the service checks it every second. A new target is adopted on the
worker's store thread, between batches, so ingest pauses while readers go on reading the old
stores:

1. forget requests the target has not applied are applied to it (a replay honours the ledger
   as of its start; requests logged since then are applied here);
2. the target is caught up from its applied offsets to the live ones, through a projector
   with the target's own encoder (``encoder.json``);
3. it is compared with the live stores at the same offsets (``compare_reindexed``: every
   DuckDB table and the memory rows but their vectors); a difference refuses the switch and
   puts the pointer back;
4. under the stores gate (readers in flight finish first, new ones wait, as for a forget) the
   projector continues on the target, the shared encoder swaps to the target's, the forget
   path and the forget desk move to the target, and the old stores are closed (their files
   stay where they are).

A target ahead of the live stores (a replay read further than the worker applied) is retried
on the next check, once the worker caught up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstack.foundation.keystore import KeyStore
from memstack.foundation.settings import Settings
from memstack.pipelines.embedding import (
    CachingEncoder,
    Encoder,
    encoder_kind_for,
    kind_of,
    make_encoder,
    recorded_encoder,
)
from memstack.pipelines.log_reader import LogRecord, read_bounded
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.replay.portable import compare_reindexed
from memstack.pipelines.replay.switch import CURRENT, current_stores, switch_stores
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.layout import DUCKDB_FILE

log = logging.getLogger(__name__)

CATCH_UP_BATCH = 512


@dataclass(frozen=True)
class SwitchOutcome:
    """What became of one switch: ``switched``, ``refused`` (with why) or ``later``."""

    target: str
    status: str
    reason: str | None = None
    encoder: str | None = None
    caught_up: int = 0
    forgets_applied: int = 0
    seconds: float = 0.0
    comparison: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "status": self.status, "reason": self.reason,
                "encoder": self.encoder, "caught_up": self.caught_up,
                "forgets_applied": self.forgets_applied, "seconds": round(self.seconds, 2),
                "comparison": self.comparison}


@dataclass
class SwitchHooks:
    """What else follows the stores: the forget path, the forget desk, the teachers."""

    exclusive: Callable[[], AbstractContextManager[None]] | None = None
    on_switched: list[Callable[[Stores], None]] = field(default_factory=list)
    on_outcome: list[Callable[[SwitchOutcome], None]] = field(default_factory=list)


def batches(records: Iterator[LogRecord], size: int) -> Iterator[list[LogRecord]]:
    batch: list[LogRecord] = []
    for record in records:
        batch.append(record)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class StoresSwitcher:
    """Watches the pointer; adopts a new target on the store thread (see the module doc)."""

    def __init__(self, settings: Settings, base: StoreProjector, encoder: CachingEncoder,
                 on_store: Callable[..., Any], apply_forgets: Callable[[Path, Encoder], int],
                 hooks: SwitchHooks, keys: KeyStore | None = None) -> None:
        self.settings, self.base, self.encoder, self.keys = settings, base, encoder, keys
        self._on_store, self._apply_forgets, self.hooks = on_store, apply_forgets, hooks
        self.attempted: set[tuple[Path, int]] = set()
        """Targets tried, with the pointer's change time: setting the pointer again retries."""
        self.last: SwitchOutcome | None = None

    @property
    def serving(self) -> Path:
        return self.base.stores.directory.resolve()

    def _pointer_changed(self) -> int:
        try:
            return (self.settings.stores_dir / CURRENT).lstat().st_mtime_ns
        except OSError:
            return 0

    def wanted(self) -> Path | None:
        """The pointer's target when it is new stores this service has not tried yet."""
        target = current_stores(self.settings).resolve()
        if target == self.serving or (target, self._pointer_changed()) in self.attempted:
            return None
        return target if (target / DUCKDB_FILE).exists() else None

    async def check(self) -> SwitchOutcome | None:
        """Adopt the pointer's target if it moved (call from a timer on the worker's loop)."""
        target = self.wanted()
        if target is None:
            return None
        loop = asyncio.get_running_loop()
        try:
            encoder = await loop.run_in_executor(None, _load_encoder, target)
        except Exception as exc:
            return self._finish(self._refused(target, f"cannot load its encoder: {exc}", 0.0))
        outcome: SwitchOutcome = await self._on_store(self.switch, target, encoder)
        return self._finish(outcome)

    def _finish(self, outcome: SwitchOutcome) -> SwitchOutcome:
        if outcome.status != "later":
            self.attempted.add((Path(outcome.target), self._pointer_changed()))
            self.last = outcome
            for hook in self.hooks.on_outcome:
                hook(outcome)
        return outcome

    def switch(self, target: Path, encoder: Encoder) -> SwitchOutcome:
        """Steps 1-4 of the module doc; call on the store thread."""
        began = time.monotonic()
        live = self.base.applied_offsets()
        try:
            forgets = self._apply_forgets(target, encoder)
            stores = Stores.open(target)
        except Exception as exc:
            log.exception("stores switch to %s: opening the target failed", target)
            return self._refused(target, f"cannot open it: {exc}", began)
        try:
            projector = StoreProjector(stores, CachingEncoder(encoder), self.settings.events_topic,
                                       keys=self.keys, forgotten=self.base.forgotten,
                                       maintain_in_background=True)
            ahead = {p: o for p, o in projector.applied_offsets().items() if o > live.get(p, 0)}
            if ahead:
                stores.close()
                return SwitchOutcome(str(target), "later", f"target ahead of live at {ahead}")
            caught = self._catch_up(projector, live)
            comparison = compare_reindexed(self.base.stores, stores)
            if not comparison.equal:
                stores.close()
                return self._refused(target, "its content differs from the live stores in "
                                     f"{', '.join(comparison.differing())}", began,
                                     comparison=_hashes(comparison))
            self._adopt(stores, encoder)
        except Exception as exc:
            stores.close()
            log.exception("stores switch to %s failed; still serving %s", target, self.serving)
            return self._refused(target, str(exc), began)
        outcome = SwitchOutcome(str(target), "switched", None, encoder.name, caught, forgets,
                                time.monotonic() - began, _hashes(comparison))
        log.info("stores switched to %s (encoder %s): %d records caught up, %d forget(s) "
                 "applied, verified equal, %.2f s", target, encoder.name, caught, forgets,
                 outcome.seconds)
        return outcome

    def _catch_up(self, projector: StoreProjector, live: dict[int, int]) -> int:
        start = projector.applied_offsets()
        if all(start.get(p, 0) >= o for p, o in live.items()):
            return 0
        count = 0
        records = read_bounded(self.settings.bootstrap, self.settings.events_topic, start, live)
        for chunk in batches(records, CATCH_UP_BATCH):
            projector.commit(projector.prepare(chunk))
            count += len(chunk)
        return count

    def _adopt(self, stores: Stores, encoder: Encoder) -> None:
        gate = self.hooks.exclusive() if self.hooks.exclusive is not None else nullcontext()
        with gate:
            old = self.base.stores
            self.base.reopen(stores)
            self.encoder.swap(encoder)
            for hook in self.hooks.on_switched:
                hook(stores)
            old.close()

    def _refused(self, target: Path, reason: str, began: float,
                 comparison: dict[str, Any] | None = None) -> SwitchOutcome:
        log.error("stores switch to %s refused: %s; still serving %s (pointer restored)",
                  target, reason, self.serving)
        switch_stores(self.settings, self.serving)
        return SwitchOutcome(str(target), "refused", reason,
                             seconds=time.monotonic() - began if began else 0.0,
                             comparison=comparison or {})


def _load_encoder(target: Path) -> Encoder:
    """The encoder that built ``target`` (whatever this process's setting says)."""
    recorded = recorded_encoder(target)
    kind = kind_of(recorded) if recorded is not None else encoder_kind_for(target)
    return make_encoder(kind).load()


def _hashes(comparison: Any) -> dict[str, Any]:
    return {"equal": comparison.equal, "differing": comparison.differing(),
            "live": comparison.hashes_a, "target": comparison.hashes_b}
