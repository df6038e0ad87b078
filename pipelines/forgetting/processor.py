"""``ForgetProcessor``: apply one forget request to every store, destroy its keys, audit it.

Order: resolve (targets along lineage, texts captured in memory) -> destroy the data keys of
session/subject/tenant scopes (crypto-shredding: the log becomes unreadable for the scope) ->
every :class:`Forgettable` erases logically and physically (those that read rows the others
erase, :class:`ForgetsFirst`, first) -> audit. The outcome is persisted
without content (ids and counts only) under ``<home>/forget/<request_id>.json``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstack.foundation.keystore import KeyStore
from memstack.operators.forget import ForgetRequest
from memstack.operators.relations import RelationRegistry
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.forgetting.audit import AuditReport, audit
from memstack.pipelines.forgetting.bundle import ForgetStores
from memstack.pipelines.forgetting.contract import (
    AuditProbe,
    ForgetReport,
    ForgetsFirst,
    Forgettable,
)
from memstack.pipelines.forgetting.keys import destroy_for
from memstack.pipelines.forgetting.lance_store import MAX_SEARCHED_TEXTS
from memstack.pipelines.forgetting.lineage import KafkaLineage, Lineage
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

    def summary(self) -> dict[str, Any]:
        """Ids and counts only: safe to persist (no forgotten content)."""
        return {"request_id": self.request.request_id, "scope": self.request.describe(),
                "events": self.events, "fact_keys": self.fact_keys,
                "keys_destroyed": len(self.keys_destroyed), "passed": self.audit.passed,
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
        t0 = time.monotonic()
        resolved = resolve(request, self.stores.duckdb.index, self.stores.lance.index,
                           self.lineage, self.registry)
        probe = self.probe(resolved)
        t1 = time.monotonic()
        destroyed = self._destroy_keys(request)
        reports = tuple(store.forget(resolved.targets) for store in self._in_order())
        t2 = time.monotonic()
        report = self.audit(probe)
        t3 = time.monotonic()
        self.stores.mark_applied(request.request_id)
        outcome = ForgetOutcome(request, len(resolved.targets.event_ids),
                                len(resolved.targets.fact_keys), tuple(destroyed), reports,
                                report, {"resolve": t1 - t0, "erase": t2 - t1,
                                         "audit": t3 - t2, "total": t3 - t0})
        self._persist(outcome)
        log.info("forgot %s: %d event(s), %d key(s) destroyed, audit %s in %.2f s",
                 request.describe(), outcome.events, len(destroyed),
                 "pass" if report.passed else "FAIL", t3 - t0)
        return outcome

    def _in_order(self) -> list[Forgettable]:
        """Stores that read what the others erase (:class:`ForgetsFirst`) first."""
        stores = self.forgettables()
        first = [s for s in stores if isinstance(s, ForgetsFirst) and s.forgets_first]
        return first + [s for s in stores if s not in first]

    def probe(self, resolved: Resolved) -> AuditProbe:
        """What the audit searches for; texts also said by surviving rows are left out."""
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
        return audit(probe, self.forgettables(), entries)

    def _destroy_keys(self, request: ForgetRequest) -> list[str]:
        return [] if self.keys is None else destroy_for(self.keys, request)

    def _persist(self, outcome: ForgetOutcome) -> None:
        if self.outcomes_dir is None:
            return
        self.outcomes_dir.mkdir(parents=True, exist_ok=True)
        path = self.outcomes_dir / f"{outcome.request.request_id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(outcome.summary(), indent=2, default=str))
        os.replace(tmp, path)


def shared_texts(stores: ForgetStores, texts: Sequence[str], ids: frozenset[str]) -> set[str]:
    """The texts that some row outside ``ids`` also holds, whole or inside a longer text
    (their bytes legitimately stay: they are not forgotten content)."""
    if not texts:
        return set()
    wanted, gone = list(texts), sorted(ids)
    table = stores.duckdb.index.query((
        "WITH p AS (SELECT unnest(?) AS t), g AS (SELECT unnest(?) AS id), "
        "s AS (SELECT text AS v FROM records WHERE text IS NOT NULL AND event_id NOT IN "
        "(SELECT id FROM g) UNION ALL SELECT payload_json FROM records WHERE event_id NOT IN "
        "(SELECT id FROM g) UNION ALL SELECT object FROM fact_entries WHERE object IS NOT NULL "
        "AND event_id NOT IN (SELECT id FROM g)) "
        "SELECT DISTINCT p.t FROM p JOIN s ON contains(s.v, p.t)"), [wanted, gone])
    shared = {t for t in table.column(0).to_pylist() if t}
    lance = stores.lance.index.lance_table
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
