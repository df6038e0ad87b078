"""``LearnerBank``: one ridge learner per shard, fed by feed records, in feed order.

Applying is idempotent, so the feed may be delivered more than once (a backfill over live
items, a publish retried after a crash): a write of an id already live is skipped, a removal of
an id not live is ignored. Each learner also keeps its items' lineage (item id -> source event
id), so a forget removes every item derived from the forgotten events.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from memstack.operators.consolidation import LearnerConfig, RidgeLearner, WriteBatch
from memstack.pipelines.consolidation.feed import BROADCAST, FeedRecord, Vector

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BankApplied:
    written: int = 0
    removed: int = 0
    skipped: int = 0


class LearnerBank:
    """Learners by shard (created on first write), with their lineage."""

    def __init__(self, config: LearnerConfig, centre: torch.Tensor, device: str = "cpu") -> None:
        self.config = config
        self.centre = centre.detach().to("cpu", torch.float64)
        self.device = device
        self.learners: dict[str, RidgeLearner] = {}
        self.sources: dict[str, dict[str, str]] = {}
        self.home: dict[str, int] = {}
        """The feed partition a shard's records arrive on (its key's partition)."""
        self.dirty: set[str] = set()

    def learner(self, shard: str) -> RidgeLearner:
        if shard not in self.learners:
            self.learners[shard] = RidgeLearner(self.config, self.centre, self.device)
            self.sources[shard] = {}
        return self.learners[shard]

    def install(self, shard: str, learner: RidgeLearner, sources: dict[str, str],
                home: int | None = None) -> None:
        """Put a restored learner in place (from a checkpoint)."""
        self.learners[shard] = learner
        self.sources[shard] = dict(sources)
        if home is not None:
            self.home[shard] = home

    def apply(self, records: Sequence[FeedRecord], partition: int | None = None) -> BankApplied:
        """Apply records in order (consecutive writes of a shard go in one batch).

        ``partition``: the feed partition they came from. A broadcast removal then applies only
        to the shards living on that partition (every partition carries a copy), so each
        learner sees its operations in its partition's order, whatever the interleaving.
        """
        written = removed = skipped = 0
        pending: dict[str, list[FeedRecord]] = {}
        for record in records:
            if record.op == "write":
                pending.setdefault(record.shard, []).append(record)
                continue
            w, s = self._flush(pending, partition)
            written, skipped = written + w, skipped + s
            removed += self.remove([record.item_id], record.shard, record.log_time, partition)
        w, s = self._flush(pending, partition)
        return BankApplied(written + w, removed, skipped + s)

    def _flush(self, pending: dict[str, list[FeedRecord]],
               partition: int | None) -> tuple[int, int]:
        written = skipped = 0
        for shard, records in pending.items():
            learner = self.learner(shard)
            if partition is not None:
                self.home.setdefault(shard, partition)
            fresh: dict[str, FeedRecord] = {}
            for r in records:
                if r.item_id in learner.log or r.item_id in fresh:
                    skipped += 1
                else:
                    fresh[r.item_id] = r
            if not fresh:
                continue
            batch = _batch(list(fresh.values()))
            learner.write_batch(batch)
            self.sources[shard].update((r.item_id, r.source_event_id or "")
                                       for r in fresh.values())
            self.dirty.add(shard)
            written += len(fresh)
        pending.clear()
        return written, skipped

    def remove(self, item_ids: Sequence[str], shard: str = BROADCAST,
               log_time: float | None = None, partition: int | None = None) -> int:
        """Remove items (from ``shard``, or for a broadcast from every learner of
        ``partition``, or of all partitions when None)."""
        shards = [shard] if shard != BROADCAST else [
            s for s in self.learners if partition is None or self.home.get(s) == partition]
        removed = 0
        for name in shards:
            learner = self.learners.get(name)
            if learner is None:
                continue
            here = [i for i in item_ids if i in learner.log]
            if here:
                removed += learner.remove(here).removed
                for i in here:
                    self.sources[name].pop(i, None)
                self.dirty.add(name)
            if log_time is not None and shard != BROADCAST:
                learner.advance(log_time)
                self.dirty.add(name)
        return removed

    def items_of_events(self, event_ids: Iterable[str]) -> dict[str, list[str]]:
        """Per shard, the live items derived from these events."""
        wanted = set(event_ids)
        out: dict[str, list[str]] = {}
        for shard, sources in self.sources.items():
            found = [i for i, src in sources.items() if src in wanted]
            if found:
                out[shard] = found
        return out

    def digests(self) -> dict[str, str]:
        return {shard: self.learners[shard].digest() for shard in sorted(self.learners)}

    @property
    def n_items(self) -> int:
        return sum(learner.n_items for learner in self.learners.values())


def _batch(records: Sequence[FeedRecord]) -> WriteBatch:
    cues = torch.from_numpy(np.stack([_need(r.cue, r) for r in records]))
    targets = torch.from_numpy(np.stack([_need(r.target, r) for r in records]))
    return WriteBatch.of([r.item_id for r in records], cues, targets,
                         [r.log_time for r in records])


def _need(vector: Vector | None, record: FeedRecord) -> Vector:
    if vector is None:
        raise ValueError(f"write record {record.item_id} carries no vectors")
    return vector
