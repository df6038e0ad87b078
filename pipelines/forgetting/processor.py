"""``ForgetProcessor``: forget requests in two phases, then the audit.

:meth:`ForgetProcessor.hide` (the logical phase, on the stores' writer thread): resolve the
request along lineage (texts captured in memory for the audit) -> destroy the data keys of
session/subject/tenant scopes (crypto-shredding) -> every store commits its logical erasure
(those that read rows the others erase, :class:`ForgetsFirst`, first). From then on no read
returns the content. :meth:`ForgetProcessor.erase` (the physical phase, any thread, for any
number of hidden requests at once): every :class:`TwoPhase` store removes the bytes once for
the whole batch -> each request is audited. Each phase is recorded without content under
``<home>/forget/<request_id>.json`` (:mod:`memstack.pipelines.forgetting.phases`).
:meth:`ForgetProcessor.apply` does both for one request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstack.keystore import KeyStore
from memstack.operators.forget import ForgetRequest, Tombstones
from memstack.operators.relations import RelationRegistry
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
from memstack.pipelines.forgetting.duckdb_store import query
from memstack.pipelines.forgetting.keys import destroy_for
from memstack.pipelines.forgetting.lance_store import MAX_SEARCHED_TEXTS, table_of
from memstack.pipelines.forgetting.lineage import KafkaLineage, Lineage
from memstack.pipelines.forgetting.phases import ForgetStatus
from memstack.pipelines.forgetting.resolve import Resolved, resolve
from memstack.pipelines.stores.lance_index import quote

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ForgetOutcome:
    request: ForgetRequest
    events: int
    fact_keys: int
    keys_destroyed: tuple[str, ...]
    reports: tuple[ForgetReport, ...]
    audit: AuditReport
    seconds: dict[str, float] = field(default_factory=dict)
    status: ForgetStatus | None = None

    def summary(self) -> dict[str, Any]:
        """Ids and counts only: safe to persist (no forgotten content)."""
        return {"request_id": self.request.request_id, "scope": self.request.describe(),
                "events": self.events, "fact_keys": self.fact_keys,
                "keys_destroyed": len(self.keys_destroyed), "passed": self.audit.passed,
                "stores": {r.store: {"deleted": r.deleted, "physical": r.physical}
                           for r in self.reports},
                "audit": self.audit.table(), "notes": self.audit.notes,
                "seconds": self.seconds}


@dataclass
class Hidden:
    """A request past its logical phase, waiting for the physical one (content in memory)."""

    resolved: Resolved
    keys_destroyed: tuple[str, ...]
    reports: dict[str, ForgetReport]
    status: ForgetStatus
    seconds: dict[str, float]

    @property
    def request(self) -> ForgetRequest:
        return self.resolved.targets.request


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
        self._hiding = threading.RLock()
        """Held while hiding; an audit takes it to read stores that are not thread-safe (the
        session state, the weights) so they never see a removal half done."""

    def forgettables(self) -> list[Forgettable]:
        return self.stores.forgettables() + self.extra

    def apply(self, request: ForgetRequest) -> ForgetOutcome:
        """Both phases and the audit, for one request."""
        return self.erase([self.hide(request)])[0]

    def hide(self, request: ForgetRequest) -> Hidden:
        """The logical phase: resolve, destroy keys, every store commits its erasure."""
        with self._hiding:
            return self._hide(request)

    def _hide(self, request: ForgetRequest) -> Hidden:
        t0 = time.monotonic()
        status = ForgetStatus(request.request_id, request.describe())
        status.reach("logged", request.log_time)
        resolved = resolve(request, self.stores.duckdb.index, self.stores.lance.index,
                           self.lineage, self.registry)
        t1 = time.monotonic()
        destroyed = tuple(self._destroy_keys(request))
        reports = {s.name: (s.hide(resolved.targets) if isinstance(s, TwoPhase)
                            else s.forget(resolved.targets)) for s in self._in_order()}
        status.reach("invisible")
        status.save(self.outcomes_dir)
        t2 = time.monotonic()
        log.info("hid %s: %d event(s) in %.2f s", request.describe(),
                 len(resolved.targets.event_ids), t2 - t0)
        return Hidden(resolved, destroyed, reports, status,
                      {"resolve": t1 - t0, "hide": t2 - t1})

    def erase(self, batch: Sequence[Hidden]) -> list[ForgetOutcome]:
        """The physical phase for every request of ``batch`` at once, then each one's audit."""
        if not batch:
            return []
        t0 = time.monotonic()
        purged = {s.name: s.purge() for s in self.forgettables() if isinstance(s, TwoPhase)}
        erased_s = time.monotonic() - t0
        for hidden in batch:
            hidden.status.reach("erased")
            hidden.status.save(self.outcomes_dir)
        return [self._audited(h, purged, erased_s, len(batch)) for h in batch]

    def _audited(self, hidden: Hidden, purged: dict[str, dict[str, float]], erased_s: float,
                 batch: int) -> ForgetOutcome:
        t0 = time.monotonic()
        report = self.audit(self.probe(hidden.resolved))
        hidden.status.reach("audited")
        self.stores.mark_applied(hidden.request.request_id)
        targets = hidden.resolved.targets
        reports = tuple(ForgetReport(r.store, r.deleted, {**r.physical,
                                                         **purged.get(name, {}),
                                                         "batch": float(batch)})
                        for name, r in hidden.reports.items())
        seconds = {**hidden.seconds, "erase": erased_s, "audit": time.monotonic() - t0}
        seconds["total"] = sum(seconds.values())
        outcome = ForgetOutcome(hidden.request, len(targets.event_ids), len(targets.fact_keys),
                                hidden.keys_destroyed, reports, report, seconds, hidden.status)
        hidden.status.facts = outcome.summary()
        hidden.status.save(self.outcomes_dir)
        log.info("forgot %s: %d event(s), %d key(s) destroyed, audit %s; phases %s",
                 hidden.request.describe(), outcome.events, len(hidden.keys_destroyed),
                 "pass" if report.passed else "FAIL", hidden.status.seconds())
        return outcome

    def _in_order(self) -> list[Forgettable]:
        """Stores that read what the others erase (:class:`ForgetsFirst`) first."""
        stores = self.forgettables()
        first = [s for s in stores if isinstance(s, ForgetsFirst) and s.forgets_first]
        return first + [s for s in stores if s not in first]

    def probe(self, resolved: Resolved) -> AuditProbe:
        """What the audit searches for; texts also said by surviving rows are left out (built
        after the erasure, off the logical phase's path: it scans every text)."""
        targets = resolved.targets
        shared = shared_texts(self.stores, targets.texts, targets.event_ids)
        texts = [t for t in targets.texts if t not in shared]
        searched = texts[:MAX_SEARCHED_TEXTS]
        vectors = (self.encoder.encode(searched) if self.encoder is not None and searched
                   else None)
        return AuditProbe.of(targets, frozenset(shared), vectors, resolved.known_times)

    def audit(self, probe: AuditProbe) -> AuditReport:
        entries = None
        if isinstance(self.lineage, KafkaLineage):
            entries = self.lineage.reread(probe.request.tenant)
        stores = [s if isinstance(s, TwoPhase) else _Serialized(s, self._hiding)
                  for s in self.forgettables()]
        return audit(probe, stores, entries)

    def _destroy_keys(self, request: ForgetRequest) -> list[str]:
        return [] if self.keys is None else destroy_for(self.keys, request)


class _Serialized:
    """A store whose audit reads wait for any hide in progress (see ``_hiding``)."""

    def __init__(self, store: Forgettable, lock: threading.RLock) -> None:
        self.store, self.lock = store, lock

    @property
    def name(self) -> str:
        return self.store.name

    def forget(self, targets: Tombstones) -> ForgetReport:
        with self.lock:
            return self.store.forget(targets)

    def residuals(self, probe: AuditProbe) -> list[Residual]:
        with self.lock:
            return self.store.residuals(probe)


def shared_texts(stores: ForgetStores, texts: Sequence[str], ids: frozenset[str]) -> set[str]:
    """The texts that some row outside ``ids`` also holds, whole or inside a longer text
    (their bytes legitimately stay: they are not forgotten content)."""
    if not texts:
        return set()
    wanted, gone = list(texts), sorted(ids)
    table = query(stores.duckdb.index, (
        "WITH p AS (SELECT unnest(?) AS t), g AS (SELECT unnest(?) AS id), "
        "s AS (SELECT text AS v FROM records WHERE text IS NOT NULL AND event_id NOT IN "
        "(SELECT id FROM g) UNION ALL SELECT payload_json FROM records WHERE event_id NOT IN "
        "(SELECT id FROM g) UNION ALL SELECT object FROM fact_entries WHERE object IS NOT NULL "
        "AND event_id NOT IN (SELECT id FROM g)) "
        "SELECT DISTINCT p.t FROM p JOIN s ON contains(s.v, p.t)"), [wanted, gone])
    shared = {t for t in table.column(0).to_pylist() if t}
    lance = table_of(stores.lance.index)
    for i in range(0, len(wanted), 200):
        chunk = wanted[i:i + 200]
        where = f"text IN ({', '.join(quote(t) for t in chunk)})"
        rows = lance.search().where(where).select(["event_id", "text"]).limit(10_000).to_arrow()
        shared |= {t for t, e in zip(rows.column("text").to_pylist(),
                                     rows.column("event_id").to_pylist(), strict=True)
                   if e not in ids}
    return shared


def apply_pending(processor: ForgetProcessor, requests: Sequence[ForgetRequest]) -> list[
    ForgetOutcome
]:
    """Apply, in log order, the requests the stores have not applied yet."""
    done = processor.stores.applied()
    return [processor.apply(r) for r in sorted(requests, key=lambda r: r.position)
            if r.request_id not in done]
