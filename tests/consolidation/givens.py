"""A consolidation store built through its real write path: events -> the memory operator ->
DuckDB (the teacher's memory) and feed items -> distillation -> a learner bank -> checkpoints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import torch

from memstack.operators.consolidation import FeatureConfig, LearnerConfig
from memstack.operators.forget import Tombstones
from memstack.operators.log import LoggedEvent
from memstack.operators.memory import MemoryOperator
from memstack.pipelines.consolidation.bank import LearnerBank
from memstack.pipelines.consolidation.checkpoints import CheckpointStore, all_groups
from memstack.pipelines.consolidation.distill import Distiller, StoreTeacher
from memstack.pipelines.consolidation.feed import feed_items
from memstack.pipelines.consolidation.forget import ConsolidationForgetStore
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.forgetting.contract import AuditProbe, ForgetReport, Residual
from memstack.pipelines.forgetting.duckdb_store import DuckDBForgetStore

SMALL = LearnerConfig(features=FeatureConfig(dim=256))


class ForgetAfterDuckDB:
    """The consolidation store's forget, run after DuckDB's (the ForgetProcessor's order)."""

    def __init__(self, duckdb: DuckDBForgetStore, store: ConsolidationForgetStore) -> None:
        self.duckdb, self.inner = duckdb, store

    @property
    def name(self) -> str:
        return self.inner.name

    def forget(self, targets: Tombstones) -> ForgetReport:
        self.duckdb.forget(targets)
        return self.inner.forget(targets)

    def residuals(self, probe: AuditProbe) -> list[Residual]:
        return self.inner.residuals(probe)


class Consolidated:
    """Checkpoints under ``<dir>/checkpoints`` (one group ``p0``), teacher over DuckDB."""

    def __init__(self, directory: Path, encoder: Encoder, centre: torch.Tensor,
                 config: LearnerConfig = SMALL) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.duckdb = DuckDBForgetStore(directory / "memstack.duckdb")
        self.events = self.duckdb.index
        self.root = directory / "checkpoints"
        self.distiller = Distiller(StoreTeacher(self.events, encoder))
        self.bank = LearnerBank(config, centre)
        self.checkpoints = CheckpointStore(self.root / "p0")
        inner = ConsolidationForgetStore(self.root, self.distiller,
                                         events=lambda: self.duckdb.index)
        self.store = ForgetAfterDuckDB(self.duckdb, inner)
        self.operator = MemoryOperator()
        self.offset = 0

    def load(self, events: Sequence[LoggedEvent]) -> None:
        """Index the events, feed their fact versions to the learners, checkpoint."""
        mutations = self.operator.apply_batch(events)
        self.events.apply(mutations, {}, topic="t")
        self.bank.apply(self.distiller.records(feed_items(mutations)), partition=0)
        self.offset += len(events)
        self.checkpoints.save(self.bank, {0: self.offset}, float(self.offset))

    def latest_banks(self) -> list[LearnerBank]:
        out = []
        for group in all_groups(self.root):
            manifest = group.latest()
            if manifest is not None:
                bank = LearnerBank(self.bank.config, self.bank.centre)
                group.load(manifest, bank)
                out.append(bank)
        return out

    def visible_ids(self, tenant: str) -> set[str]:
        return {src for bank in self.latest_banks() for shard, sources in bank.sources.items()
                if shard == tenant or shard.startswith(tenant + "#")
                for src in sources.values()}

    def fingerprint(self) -> str:
        """A hash of the live items (ids, lineage, cue and target bytes, weight, log time)."""
        h = hashlib.sha256()
        for bank in self.latest_banks():
            for shard in sorted(bank.learners):
                live = bank.learners[shard].log.live()
                order = sorted(range(len(live)), key=lambda i: live.item_ids[i])
                for i in order:
                    item = live.item_ids[i]
                    h.update(f"{shard}|{item}|{bank.sources[shard][item]}|".encode())
                    for t in (live.cues[i], live.targets[i], live.weights[i], live.log_times[i]):
                        h.update(t.numpy().tobytes())
        return h.hexdigest()
