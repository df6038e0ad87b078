"""``ShardedProjector``: one worker's batches applied to the shards of the partitions it owns.

Each shard is an ordinary :class:`~memstack.pipelines.projector.StoreProjector` over its own
stores directory (``layout.shard_dir``), so everything the single-worker pipeline guarantees
holds per shard: rows and the partition's next offset commit in one DuckDB transaction, Lance
merges by id, a re-read batch changes nothing. The worker owns a shard exactly while Kafka
assigns it the partition:

- :meth:`assign` (on the store thread, after each rebalance, before the consumer seeks) closes
  the shards of partitions taken away and opens those of new ones, waiting while the previous
  owner still holds the DuckDB file; the seek then goes to the offset the shard committed, so a
  moved shard resumes where its last owner stopped, and an empty directory (a new machine) is
  rebuilt from the start of the log;
- reads (the router's requests) hold :attr:`gate` shared; :meth:`assign` takes it alone, so no
  read runs on a shard being closed.

A shard that was opened behind the partition's end offset of that moment is *catching up*
until it reaches it: the router marks answers that include it as partial.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from memstack.pipelines.commit_path import encode_new, memory_rows
from memstack.pipelines.contracts import Plan, Projector
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.service.gate import ReadWriteGate
from memstack.pipelines.shards.layout import shard_dir
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.errors import StoreLockedError

log = logging.getLogger(__name__)

OpenShard = Callable[[Path], tuple[Projector, Stores]]
"""Open the stores in a shard directory and a projector over them (the caller closes both)."""

EndOffsets = Callable[[], Mapping[int, int]]
"""The events topic's end offset per partition now (blocking)."""


@dataclass
class Shard:
    """One open shard: its partition, stores and projector, and the offset it catches up to."""

    partition: int
    stores: Stores
    projector: Projector
    target: int = 0

    def applied(self) -> int:
        return self.projector.applied_offsets().get(self.partition, 0)


@dataclass(frozen=True)
class ShardedPlan(Plan):
    """A batch's plan: the union (what the worker's hooks see) and one plan per shard."""

    parts: dict[int, Plan] = field(default_factory=dict)


def shard_vectors(encoder: Encoder) -> Callable[[Plan], Plan]:
    """The live processor's encode step for a :class:`ShardedPlan`: the memory texts of every
    shard's part encoded in one call (each distinct text once), each part then carrying its
    own texts' vectors, so the shards' commits encode nothing and the encoding overlaps the
    store thread's writes (``pipelines/live_batches.py``)."""
    def vectors(plan: Plan) -> Plan:
        assert isinstance(plan, ShardedPlan), "plan was not prepared by a ShardedProjector"
        texts = [row.text for part in plan.parts.values() for row in memory_rows(part)]
        found = {**plan.vectors, **encode_new(encoder, texts, plan.vectors)}
        parts = {partition: replace(part, vectors={
                     **part.vectors, **{r.text: found[r.text] for r in memory_rows(part)}})
                 for partition, part in plan.parts.items()}
        return replace(plan, parts=parts, vectors=found)
    return vectors


class ShardedProjector:
    """The :class:`~memstack.pipelines.contracts.Projector` over the shards a worker owns."""

    def __init__(self, root: Path, open_shard: OpenShard, end_offsets: EndOffsets, *,
                 open_timeout_s: float = 120.0) -> None:
        self.root = Path(root)
        self._open = open_shard
        self._ends = end_offsets
        self._timeout = open_timeout_s
        self._shards: dict[int, Shard] = {}
        self._generation = 0
        self.gate = ReadWriteGate()
        """Reads hold it shared; :meth:`assign` holds it alone while shards close and open."""

    # -- ownership -----------------------------------------------------------------------

    def expect(self) -> int:
        """Note that a rebalance happened (on the event loop, before its :meth:`assign` is
        queued): an older assignment still waiting for a shard gives up, so two workers never
        wait on each other's shards across rebalances."""
        self._generation += 1
        return self._generation

    def assign(self, partitions: Sequence[int], generation: int | None = None) -> None:
        """Own exactly ``partitions``: close the others' shards, open the new ones.

        Closing comes first, so in one rebalance every worker releases before it waits."""
        wanted = set(partitions)
        with self.gate.writing():
            for partition in sorted(set(self._shards) - wanted):
                shard = self._shards.pop(partition)
                shard.projector.close()
                shard.stores.close()
                log.info("shard p%d released at offset %d", partition, shard.applied())
            new = sorted(wanted - set(self._shards))
            ends = dict(self._ends()) if new else {}
            for partition in new:
                opened = self._open_shard(partition, generation)
                if opened is None:
                    log.info("a newer rebalance came while p%d was held elsewhere; it decides",
                             partition)
                    return
                opened.target = ends.get(partition, 0)
                self._shards[partition] = opened
                log.info("shard p%d opened at offset %d (end offset %d)", partition,
                         opened.applied(), opened.target)

    def _open_shard(self, partition: int, generation: int | None) -> Shard | None:
        """Open the partition's shard, waiting while its previous owner still holds it
        (None: a newer rebalance superseded this one meanwhile)."""
        directory = shard_dir(self.root, partition)
        directory.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                projector, stores = self._open(directory)
                return Shard(partition, stores, projector)
            except StoreLockedError:
                if generation is not None and generation != self._generation:
                    return None
                if time.monotonic() > deadline:
                    raise
                log.info("shard p%d is still held by its previous owner; waiting", partition)
                time.sleep(0.5)

    def owned(self) -> list[int]:
        return sorted(self._shards)

    def shard(self, partition: int) -> Shard | None:
        """The open shard of ``partition`` (hold :attr:`gate` shared while using it)."""
        return self._shards.get(partition)

    def catching_up(self) -> list[int]:
        """Partitions whose shard has not yet reached the end offset seen when it opened."""
        return sorted(p for p, s in self._shards.items() if s.applied() < s.target)

    # -- the Projector protocol ----------------------------------------------------------

    def applied_offsets(self) -> dict[int, int]:
        return {p: s.applied() for p, s in self._shards.items()}

    def prepare(self, records: list[LogRecord]) -> Plan:
        """Plan per owned shard; records of partitions this worker does not own are left
        unapplied (a batch fetched before a rebalance: their new owner applies them)."""
        by_partition: dict[int, list[LogRecord]] = {}
        for record in records:
            by_partition.setdefault(record.position.partition, []).append(record)
        parts: dict[int, Plan] = {}
        for partition, recs in sorted(by_partition.items()):
            shard = self._shards.get(partition)
            if shard is None:
                log.info("dropping %d records of p%d: not owned since the last rebalance",
                         len(recs), partition)
                continue
            parts[partition] = shard.projector.prepare(recs)
        plans = list(parts.values())
        return ShardedPlan([e for p in plans for e in p.events],
                           [m for p in plans for m in p.mutations],
                           [d for p in plans for d in p.dead_letters],
                           {k: v for p in plans for k, v in p.next_offsets.items()},
                           parts=parts)

    def commit(self, plan: Plan) -> None:
        """Commit shard by shard: each shard's rows and offset are one transaction, so a crash
        between two shards re-reads the batch and the committed shard skips it."""
        assert isinstance(plan, ShardedPlan), "plan was not prepared by a ShardedProjector"
        for partition, part in sorted(plan.parts.items()):
            self._shards[partition].projector.commit(part)

    def close(self) -> None:
        with self.gate.writing():
            for shard in self._shards.values():
                shard.projector.close()
                shard.stores.close()
            self._shards.clear()
