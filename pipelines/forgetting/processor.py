"""``ForgetProcessor``: apply forget requests to every store in two phases, then audit them.

Logical phase (:meth:`ForgetProcessor.hide`, on the writer's thread, bounded): resolve (targets
along lineage, texts captured in memory) -> destroy the data keys of session/subject/tenant
scopes (crypto-shredding: the log becomes unreadable for the scope) -> the stores that read rows
the others erase (:class:`ForgetsFirst`) forget -> every :class:`TwoPhase` store erases
logically (no read returns the content once this returns). Physical phase
(:meth:`ForgetProcessor.erase`, the background eraser, several requests at once): every
two-phase store purges the bytes in one pass, the other stores forget, then each request is
audited. :meth:`ForgetProcessor.apply` runs both for one request (offline and batch paths).
Each phase is persisted without content (ids, counts, times) under
``<home>/forget/<request_id>.json`` (:mod:`~memstack.pipelines.forgetting.phases`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard

from memstack.foundation.keystore import KeyStore
from memstack.operators.forget import ForgetRequest
from memstack.operators.relations import RelationRegistry
from memstack.operators.timeline import FactKey
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.forgetting.audit import AuditReport, audit
from memstack.pipelines.forgetting.bundle import ForgetStores
from memstack.pipelines.forgetting.contract import (
    AuditProbe,
    ForgetReport,
    ForgetsFirst,
    Forgettable,
    Residual,
    TwoPhase,
)
from memstack.pipelines.forgetting.keys import destroy_for
from memstack.pipelines.forgetting.lance_store import MAX_SEARCHED_TEXTS
from memstack.pipelines.forgetting.lineage import KafkaLineage, Lineage
from memstack.pipelines.forgetting.phases import Phases, write_status
from memstack.pipelines.forgetting.resolve import Resolved, resolve
from memstack.pipelines.forgetting.shared import shared_texts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hidden:
    """A request after its logical phase: no read returns its content; bytes may remain until
    the physical phase (:meth:`ForgetProcessor.erase`) purges them."""

    request: ForgetRequest
    resolved: Resolved
    """The targets and their known times (texts in memory only: the audit's probe is built
    from them in the physical phase)."""
    keys_destroyed: tuple[str, ...]
    reports: tuple[ForgetReport, ...]
    """What the logical phase did per store (rows deleted; the forgets-first stores' whole
    forget)."""
    phases: Phases
    seconds: dict[str, float] = field(default_factory=dict)
    audited: tuple[tuple[str, tuple[Residual, ...]], ...] = ()
    """The forgets-first stores (the session state) audited on the writer's thread, where
    their state lives, right after the logical phase."""
    stores_dir: Path | None = None
    """The stores it was hidden in (the physical phase must erase it there)."""

    def summary(self) -> dict[str, Any]:
        """Ids, counts and times only: safe to persist (no forgotten content)."""
        targets = self.resolved.targets
        return {"request_id": self.request.request_id, "scope": self.request.describe(),
                "events": len(targets.event_ids), "fact_keys": len(targets.fact_keys),
                "keys_destroyed": len(self.keys_destroyed), **self.phases.to_json(),
                "stores": {r.store: {"deleted": r.deleted, "physical": r.physical}
                           for r in self.reports},
                "seconds": self.seconds}


@dataclass(frozen=True)
class Purged:
    """A batch after the physical phase, before its audits (:meth:`ForgetProcessor.purge`)."""

    batch: tuple[Hidden, ...]
    probes: tuple[AuditProbe, ...]
    physical: dict[str, dict[str, float]]
    """Per two-phase store, what its purge did (once for the whole batch)."""
    deferred: dict[str, list[ForgetReport]]
    """Per one-phase store, its forget of each request."""
    erased_at: datetime
    spent: dict[str, float]


@dataclass(frozen=True)
class ForgetOutcome:
    request: ForgetRequest
    events: int
    fact_keys: int
    keys_destroyed: tuple[str, ...]
    reports: tuple[ForgetReport, ...]
    audit: AuditReport
    seconds: dict[str, float] = field(default_factory=dict)
    phases: Phases = field(default_factory=Phases)

    def summary(self) -> dict[str, Any]:
        """Ids, counts and times only: safe to persist (no forgotten content)."""
        return {"request_id": self.request.request_id, "scope": self.request.describe(),
                "events": self.events, "fact_keys": self.fact_keys,
                "keys_destroyed": len(self.keys_destroyed), "passed": self.audit.passed,
                **self.phases.to_json(),
                "stores": {r.store: {"deleted": r.deleted, "physical": r.physical}
                           for r in self.reports},
                "audit": self.audit.table(), "notes": self.audit.notes,
                "seconds": self.seconds}


class ForgetProcessor:
    """Applies requests to one :class:`ForgetStores` (plus any further forgettable stores)."""

    def __init__(self, stores: ForgetStores, *, keys: KeyStore | None = None,
                 lineage: Lineage | None = None, encoder: Encoder | None = None,
                 registry: RelationRegistry | None = None,
                 extra: Sequence[Forgettable] = (), outcomes_dir: Path | None = None) -> None:
        self.stores = stores
        self.keys = keys
        self.lineage = lineage
        self.encoder = encoder
        self.registry = registry or RelationRegistry()
        self.extra = list(extra)
        self.outcomes_dir = outcomes_dir

    def forgettables(self) -> list[Forgettable]:
        return self.stores.forgettables() + self.extra

    def apply(self, request: ForgetRequest) -> ForgetOutcome:
        """Both phases for one request, then its audit."""
        return self.erase([self.hide(request)])[0]

    def hide(self, request: ForgetRequest) -> Hidden:
        """The logical phase: once this returns no read returns the request's content."""
        return self.hide_all([request])[0]

    def hide_all(self, requests: Sequence[ForgetRequest],
                 exclusive: Callable[[], AbstractContextManager[None]] = nullcontext,
                 ) -> list[Hidden]:
        """The logical phase of ``requests`` in their order, with the effect of hiding them
        one after the other at about the cost of one: each is resolved over the stores as
        they are, and consecutive requests whose targets (event ids and fact keys) are
        disjoint are erased together, one transaction per store (:meth:`TwoPhase.erase_all`).
        A request that overlaps the ones waiting (a later request's fact versions are
        recomputed from what the earlier ones leave) hides them first and is resolved again.
        Each resolution and each group's erase run inside ``exclusive()`` (one at a time with
        the eraser's purges, as a single hide did)."""
        out: list[Hidden] = []
        group: list[tuple[ForgetRequest, Resolved, float]] = []
        ids: set[str] = set()
        keys: set[FactKey] = set()
        pending = list(requests)
        while pending:
            began = time.monotonic()
            with exclusive():  # no purge (the eraser's) while it reads the stores
                resolved = resolve(pending[0], self.stores.duckdb.index,
                                   self.stores.lance.index, self.lineage, self.registry)
            targets = resolved.targets
            if group and (ids & targets.event_ids or keys & targets.fact_keys):
                with exclusive():
                    out += self._hide_group(group)
                group, ids, keys = [], set(), set()
                continue  # resolved again over what the group left
            group.append((pending.pop(0), resolved, time.monotonic() - began))
            ids |= targets.event_ids
            keys |= targets.fact_keys
        if group:
            with exclusive():
                out += self._hide_group(group)
        return out

    def _hide_group(self, group: Sequence[tuple[ForgetRequest, Resolved, float]],
                    ) -> list[Hidden]:
        """Hide resolved requests with disjoint targets: their keys destroyed, the
        forgets-first stores forget them in order (each as if the earlier ones were erased),
        every two-phase store erases them all at once, then the forgets-first stores are
        audited (as for a single request: after the erase)."""
        began = time.monotonic()
        destroyed = [self._destroy_keys(request) for request, _, _ in group]
        batch = [resolved.targets for _, resolved, _ in group]
        reports: list[list[ForgetReport]] = [[] for _ in group]
        for store in self._in_order():
            if _forgets_first(store):
                done = store.forget_all(batch)
            elif isinstance(store, TwoPhase):
                done = [ForgetReport(store.name, d) for d in store.erase_all(batch)]
            else:
                continue  # a one-phase store forgets in the physical phase
            for n, report in enumerate(done):
                reports[n].append(report)
        early = [tuple((s.name, tuple(s.residuals(AuditProbe.of(
            resolved.targets, known_times=resolved.known_times))))
            for s in self.forgettables() if _forgets_first(s)) for _, resolved, _ in group]
        hide_s = time.monotonic() - began
        out = []
        for n, (request, resolved, resolve_s) in enumerate(group):
            phases = Phases.logged_at(request.log_time).reached("invisible")
            hidden = Hidden(request, resolved, tuple(destroyed[n]), tuple(reports[n]), phases,
                            {"resolve": resolve_s, "hide": hide_s}, early[n],
                            self.stores.directory)
            write_status(self.outcomes_dir, request.request_id, hidden.summary())
            log.info("hid %s: %d event(s), %d key(s) destroyed in %.3f s (%d hidden together)",
                     request.describe(), len(resolved.targets.event_ids), len(destroyed[n]),
                     resolve_s + hide_s, len(group))
            out.append(hidden)
        return out

    def erase(self, batch: Sequence[Hidden],
              exclusive: Callable[[], AbstractContextManager[None]] = nullcontext,
              stop: Callable[[], bool] = lambda: False) -> list[ForgetOutcome]:
        """The physical phase for ``batch`` in one pass per store (:meth:`purge`), then each
        request's audit (:meth:`audit_purged`); once ``stop()`` is true no further request is
        audited (nor marked applied)."""
        return self.audit_purged(self.purge(batch, exclusive), stop)

    def purge(self, batch: Sequence[Hidden],
              exclusive: Callable[[], AbstractContextManager[None]] = nullcontext) -> Purged:
        """Every two-phase store purges the bytes of ``batch`` in one pass (each purge runs
        its steps that must not overlap a read or a hide inside ``exclusive()``), the
        one-phase stores forget each request. Nothing is marked applied before its audit."""
        t0 = time.monotonic()
        found = self.probes([h.resolved for h in batch])
        probes = sorted({p for probe in found for p in probe.byte_probes})
        probe_s = time.monotonic() - t0
        deferred: dict[str, list[ForgetReport]] = {}
        two_phase: list[tuple[str, TwoPhase]] = []
        for store in self.forgettables() if batch else ():
            if _forgets_first(store):
                continue
            if isinstance(store, TwoPhase):
                two_phase.append((store.name, store))
            else:  # a one-phase store (the consolidated weights): forgets here, per request
                deferred[store.name] = [store.forget(h.resolved.targets) for h in batch]
        physical = {name: {**figures, "batch": float(len(batch))}
                    for name, figures in purge_together(two_phase, probes, exclusive).items()}
        return Purged(tuple(batch), tuple(found), physical, deferred, datetime.now(UTC),
                      {"probe": probe_s, "erase": time.monotonic() - t0 - probe_s})

    def audit_purged(self, purged: Purged,
                     stop: Callable[[], bool] = lambda: False) -> list[ForgetOutcome]:
        """Audit every request of ``purged`` and mark it applied, until ``stop()``."""
        outcomes = []
        for i in range(len(purged.batch)):
            if stop():  # the rest stays unapplied: hidden and erased again after a restart
                log.info("stopping: %d erased request(s) left unaudited", len(purged.batch) - i)
                break
            outcomes.append(self.audit_one(purged, i))
        return outcomes

    def audit_one(self, purged: Purged, i: int,
                  exclusive: Callable[[], AbstractContextManager[None]] = nullcontext,
                  ) -> ForgetOutcome:
        """Audit request ``i`` of ``purged`` inside ``exclusive()`` (an auditor in another
        thread: no purge may run while it reads) and mark it applied."""
        with exclusive():
            return self._audited(purged.batch[i], purged.probes[i], i, purged.physical,
                                 purged.deferred, purged.erased_at, purged.spent)

    def _audited(self, hidden: Hidden, probe: AuditProbe, i: int,
                 physical: dict[str, dict[str, float]], deferred: dict[str, list[ForgetReport]],
                 erased_at: datetime, spent: dict[str, float]) -> ForgetOutcome:
        t0 = time.monotonic()
        report = self.audit(probe, hidden.audited)
        audit_s = time.monotonic() - t0
        self.stores.mark_applied(hidden.request.request_id)
        reports = [replace(r, physical={**r.physical, **physical.get(r.store, {})})
                   for r in hidden.reports]
        reports += [found[i] for found in deferred.values()]
        phases = hidden.phases.reached("erased", erased_at).reached("audited")
        targets = hidden.resolved.targets
        seconds = {**hidden.seconds, **spent, "audit": audit_s}
        outcome = ForgetOutcome(hidden.request, len(targets.event_ids), len(targets.fact_keys),
                                hidden.keys_destroyed, tuple(reports), report,
                                {**seconds, "total": sum(seconds.values())}, phases)
        write_status(self.outcomes_dir, hidden.request.request_id, outcome.summary())
        log.info("forgot %s: %d event(s) erased, audit %s, %.2f s after it was logged",
                 hidden.request.describe(), outcome.events,
                 "pass" if report.passed else "FAIL",
                 phases.seconds_since_logged().get("audited", 0.0))
        return outcome

    def _in_order(self) -> list[Forgettable]:
        """Stores that read what the others erase (:class:`ForgetsFirst`) first."""
        stores = self.forgettables()
        first: list[Forgettable] = [s for s in stores if _forgets_first(s)]
        return first + [s for s in stores if s not in first]

    def probe(self, resolved: Resolved) -> AuditProbe:
        """What the audit searches for; texts also said by surviving rows are left out."""
        return self.probes([resolved])[0]

    def probes(self, batch: Sequence[Resolved]) -> list[AuditProbe]:
        """:meth:`probe` of each request of a batch purged together, with one search for
        shared texts (the batch's rows all go, so a text is shared only when a row outside
        the whole batch holds it) and one encoder call."""
        gone = frozenset(i for resolved in batch for i in resolved.targets.event_ids)
        texts = list(dict.fromkeys(t for resolved in batch for t in resolved.targets.texts))
        shared = shared_texts(self.stores, texts, gone)
        searched = [[t for t in resolved.targets.texts if t not in shared][:MAX_SEARCHED_TEXTS]
                    for resolved in batch]
        flat = [t for texts_of in searched for t in texts_of]
        vectors = self.encoder.encode(flat) if self.encoder is not None and flat else None
        out, at = [], 0
        for resolved, texts_of in zip(batch, searched, strict=True):
            mine = None if vectors is None or not texts_of else vectors[at:at + len(texts_of)]
            at += len(texts_of)
            out.append(AuditProbe.of(resolved.targets,
                                     frozenset(shared & set(resolved.targets.texts)), mine,
                                     resolved.known_times))
        return out

    def audit(self, probe: AuditProbe,
              audited: Sequence[tuple[str, Sequence[Residual]]] = ()) -> AuditReport:
        entries = None
        if isinstance(self.lineage, KafkaLineage):
            entries = self.lineage.reread(probe.request)
        return audit(probe, self.forgettables(), entries, audited)

    def _destroy_keys(self, request: ForgetRequest) -> list[str]:
        return [] if self.keys is None else destroy_for(self.keys, request)


def purge_together(stores: Sequence[tuple[str, TwoPhase]], probes: Sequence[bytes],
                   exclusive: Callable[[], AbstractContextManager[None]] = nullcontext,
                   ) -> dict[str, dict[str, float]]:
    """Every (name, store)'s :meth:`~TwoPhase.purge`, at the same time, inside one
    ``exclusive()``; per name, its figures.

    The stores' files are disjoint, so their purges need no order among themselves, only the
    exclusion of hides and reads; one after the other, each inside its own ``exclusive()``,
    the DuckDB purge and the Lance purge took their sum (0.8 s + 1.0 s at 1M rows, measured),
    and both spend it in native code that releases the GIL. An error in one is raised once
    the others have finished."""
    if len(stores) < 2:
        return {name: store.purge(probes, exclusive) for name, store in stores}
    with exclusive(), ThreadPoolExecutor(len(stores), thread_name_prefix="purge") as pool:
        running = {name: pool.submit(store.purge, probes) for name, store in stores}
        return {name: future.result() for name, future in running.items()}


def _forgets_first(store: object) -> TypeGuard[ForgetsFirst]:
    return isinstance(store, ForgetsFirst) and store.forgets_first


def apply_pending(processor: ForgetProcessor, requests: Sequence[ForgetRequest]) -> list[
    ForgetOutcome
]:
    """Apply, in log order, the requests the stores have not applied yet."""
    done = processor.stores.applied()
    return [processor.apply(r) for r in sorted(requests, key=lambda r: r.position)
            if r.request_id not in done]
