"""Forgetting in the consolidated weights: the ``Forgettable`` of the consolidation store.

``forget(targets)``: every item derived from a forgotten event is removed exactly (its terms
subtracted, its write-log row erased), and the request's fact mutations are applied as feed
items (a version no longer derived is removed; one that becomes current again, e.g. the value a
forgotten fact had superseded, is written, distilled from the already-forgotten stores). This is
done in **every retained checkpoint** (so no as-of read brings the content back) and, when a
producer is given, also sent down the feed so running actors apply it in order.

Run it after the DuckDB and LanceDB stores (the ``ForgetProcessor`` order: ``extra`` stores come
last), so the teacher already sees memory without the forgotten facts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from memstack.operators.consolidation import LearnerConfig
from memstack.operators.forget import Tombstones
from memstack.pipelines.consolidation.bank import LearnerBank
from memstack.pipelines.consolidation.checkpoints import (
    CheckpointStore,
    Manifest,
    all_groups,
)
from memstack.pipelines.consolidation.distill import Distiller
from memstack.pipelines.consolidation.feed import (
    FeedRecord,
    Sharding,
    feed_items,
    partition_of,
)
from memstack.pipelines.consolidation.producer import FeedProducer
from memstack.pipelines.forgetting.contract import (
    AuditProbe,
    ForgetReport,
    Residual,
    files_containing,
)
from memstack.pipelines.stores.base import EventIndex

log = logging.getLogger(__name__)

NAME = "consolidation"


class ConsolidationForgetStore:
    """:class:`~memstack.pipelines.forgetting.contract.Forgettable` over the checkpoints."""

    def __init__(self, root: Path, distiller: Distiller, *, sharding: Sharding | None = None,
                 producer: FeedProducer | None = None, device: str = "cpu",
                 events: Callable[[], EventIndex] | None = None) -> None:
        """``events``: the current event index (the DuckDB forget store reopens its file after
        compaction, e.g. ``lambda: forget_stores.duckdb.index``); the teacher is rebound to it."""
        self.root = Path(root)
        self.events = events
        self.distiller = distiller
        self.sharding = sharding or Sharding()
        self.producer = producer
        self.device = device

    @property
    def name(self) -> str:
        return NAME

    def forget(self, targets: Tombstones) -> ForgetReport:
        began = time.monotonic()
        items = feed_items(targets.fact_mutations, self.sharding)
        if self.events is not None:
            self.distiller.teacher.events = self.events()
        records = self.distiller.records(items)
        if self.producer is not None and items:
            self.producer.publish_items(items)
        removed = rewritten = 0
        groups = all_groups(self.root)
        n_partitions = 1 + max((p for g in groups for p in _partitions(g)), default=0)
        for group in groups:
            mine = [r for r in records if r.op == "remove"
                    or partition_of(r.shard, n_partitions) in _partitions(group)]
            for manifest in group.manifests():
                n, changed = self._forget_in(group, manifest, targets.event_ids, mine,
                                             n_partitions)
                removed += n
                rewritten += int(changed)
        physical = {"checkpoints_rewritten": float(rewritten), "s": time.monotonic() - began,
                    "feed_items": float(len(items))}
        log.info("consolidation forgot %d item(s) in %d checkpoint(s)", removed, rewritten)
        return ForgetReport(NAME, {"items": removed}, physical)

    def _forget_in(self, group: CheckpointStore, manifest: Manifest, event_ids: frozenset[str],
                   records: Sequence[FeedRecord], n_partitions: int) -> tuple[int, bool]:
        bank = self._bank(group, manifest)
        before = bank.digests()
        removed = 0
        for shard, ids in bank.items_of_events(event_ids).items():
            removed += bank.remove(ids, shard)
        known = [r for r in records if r.op == "remove" or r.log_time <= manifest.known]
        done = bank.apply(known)
        removed += done.removed
        for shard in bank.learners:
            bank.home.setdefault(shard, partition_of(shard, n_partitions))
        if bank.digests() == before:
            return removed, False
        group.rewrite(manifest, bank)
        return removed, True

    def _bank(self, group: CheckpointStore, manifest: Manifest) -> LearnerBank:
        first = next(iter(manifest.shards), None)
        restored = group.load_shard(manifest, first, self.device) if first else None
        config = restored.learner.config if restored else LearnerConfig()
        centre = (restored.learner.features.centre if restored
                  else torch.zeros(config.features.dim_in, dtype=torch.float64))
        bank = LearnerBank(config, centre, self.device)
        group.load(manifest, bank, self.device)
        return bank

    def residuals(self, probe: AuditProbe) -> list[Residual]:
        out: list[Residual] = []
        items = files = 0
        paths: list[str] = []
        for group in all_groups(self.root):
            for manifest in group.manifests():
                bank = self._bank(group, manifest)
                items += sum(len(v) for v in bank.items_of_events(probe.event_ids).values())
                paths += [str(p) for p in manifest.path.iterdir() if p.is_file()]
        if items:
            out.append(Residual(NAME, "items", items,
                                "checkpointed items derived from forgotten events"))
        files = len(files_containing(paths, probe.byte_probes))
        if files:
            out.append(Residual(NAME, "file_bytes", files, "checkpoint files hold the text"))
        return out


def _partitions(group: CheckpointStore) -> set[int]:
    name = group.directory.name
    return {int(p) for p in name[1:].split("-") if p.isdigit()} if name.startswith("p") else set()
