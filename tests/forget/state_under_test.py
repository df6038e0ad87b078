"""The session state as a store under the forget contract (real updater, DuckDB, MiniLM).

Events go through the state's own write path (``SessionStateUpdater.apply``; snapshots into an
in-memory changelog) and through the memory operator into real DuckDB and LanceDB stores, which is
where the state store reads a forgotten event's item back from (its text and stored vector, or
its fact's subject, relation and object, and its log position). The "log" is the events loaded
so far (their envelopes place fact entries in their sessions). ``store.forget`` runs as the
ForgetProcessor orders it: the state first (it reads the rows), then the stores erase them.

``visible_ids`` are the events whose terms a state holds: the state's sums are decomposed, by
least squares, over the terms of every item loaded into that session (the terms are linearly
independent: 66k numbers each); an event is visible when its coefficient is above 1/2 (a
present term has 1, a removed one 0, to rounding).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from memstack.operators.forget import Tombstones
from memstack.operators.log import LoggedEvent
from memstack.operators.memory import MemoryOperator
from memstack.operators.session_state.arena import SessionSums
from memstack.operators.session_state.codec import restore_sums
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.forgetting.contract import (
    AuditProbe,
    ForgetReport,
    Forgettable,
    Residual,
)
from memstack.pipelines.forgetting.duckdb_store import DuckDBForgetStore
from memstack.pipelines.forgetting.lineage import LogEntry, StaticLineage
from memstack.pipelines.forgetting.session_state_store import (
    SessionStateForgetStore,
    StoreItems,
    content_hash,
)
from memstack.pipelines.session_state.table import SessionStateUpdater, StateItem, item_of
from memstack.schemas.events import ForgetScope
from tests.forget.stores import LanceUnderTest
from tests.integration.test_session_state_live import MemorySink


class LogSoFar:
    """Lineage over the events loaded so far (the log keeps every envelope)."""

    def __init__(self, events: list[LoggedEvent]) -> None:
        self.events = events

    def scoped(self, tenant: str, scope: ForgetScope) -> list[LogEntry]:
        return StaticLineage(self.events).scoped(tenant, scope)

    def of_events(self, tenant: str, ids: Iterable[str]) -> dict[str, LogEntry]:
        return StaticLineage(self.events).of_events(tenant, ids)


class StateThenStores:
    """The state store's forget, then the stores' (the ForgetProcessor's order for them)."""

    def __init__(self, state: SessionStateForgetStore, *stores: Forgettable) -> None:
        self.state, self.stores = state, stores

    @property
    def name(self) -> str:
        return self.state.name

    def forget(self, targets: Tombstones) -> ForgetReport:
        report = self.state.forget(targets)
        for store in self.stores:
            store.forget(targets)
        return report

    def residuals(self, probe: AuditProbe) -> list[Residual]:
        return self.state.residuals(probe)


class SessionStateUnderTest:
    def __init__(self, directory: Path, encoder: Encoder) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.duckdb = DuckDBForgetStore(directory / "memstack.duckdb")
        self.lance = LanceUnderTest(directory / "lance", encoder)
        self.sink = MemorySink()
        self.updater = SessionStateUpdater(self.sink, self.sink, encoder)
        self.log: list[LoggedEvent] = []
        items = StoreItems(lambda: self.duckdb.index, LogSoFar(self.log),
                           lambda: self.lance.store.index)
        self.state = SessionStateForgetStore(self.updater, items)
        self.store = StateThenStores(self.state, self.duckdb, self.lance.store)

    def load(self, events: Sequence[LoggedEvent]) -> None:
        self.duckdb.index.apply(MemoryOperator().apply_batch(events), {}, topic="t")
        self.lance.load(events)
        asyncio.run(self.updater.apply(events))
        self.log.extend(events)

    def states(self) -> dict[str, SessionSums]:
        return {key: restore_sums(data) for key, data in self.sink.latest.items()}

    def visible_ids(self, tenant: str) -> set[str]:
        out: set[str] = set()
        for key, state in self.states().items():
            if key.startswith(f"{tenant}/") and any(state.counts):
                items = [i for e in self.log if (i := item_of(e)) is not None and i.key == key]
                weights = contributions(self.updater, state, items)
                out |= {i.event_id for i, w in zip(items, weights, strict=True) if w > 0.5}
        return out

    def fingerprint(self) -> str:
        return content_hash(self.states())


def contributions(updater: SessionStateUpdater, state: SessionSums,
                  items: Sequence[StateItem]) -> list[float]:
    """Least-squares coefficients of each item's term in ``state`` (1: held, 0: not)."""
    at = state.last_time
    basis = torch.stack([updater.recompute([i])[i.key].sums_at(at).flatten() for i in items],
                        dim=1)
    target = state.sums_at(at).flatten()[:, None]
    solution: torch.Tensor = torch.linalg.lstsq(basis, target).solution
    return [float(w) for w in solution[:, 0]]
