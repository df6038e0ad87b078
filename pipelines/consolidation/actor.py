"""``ConsolidationWorker``: feed partitions in, learners updated, checkpoints out; and its actor.

A worker owns a fixed set of feed partitions (manual assignment, no consumer group) and one
learner per shard found on them (:class:`LearnerBank`). On start it loads its latest checkpoint
and seeks every partition to the offsets saved with it, so each feed record is applied exactly
once in effect. Records are applied in *offset windows* (``[kB, (k+1)B)`` per partition, and
whatever is buffered when the worker is idle or caught up), so a resumed worker batches the
same records together as an uninterrupted one and ends with bit-identical weights.

``ConsolidationActor`` (:func:`actor_class`) is the same class as a Ray actor; it asks for one
GPU when the cluster has a free one and then runs the learners with ``device="cuda"``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from kafka import TopicPartition

from memstack.foundation.log_coordinates import next_offset
from memstack.operators.consolidation import LearnerConfig, RidgeLearner
from memstack.pipelines.consolidation.bank import LearnerBank
from memstack.pipelines.consolidation.checkpoints import CheckpointStore, group_name
from memstack.pipelines.consolidation.feed import FeedRecord
from memstack.pipelines.log_reader import open_consumer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerConfig:
    """One worker: where the feed is, which partitions, where checkpoints go, the learner."""

    bootstrap: str
    topic: str
    partitions: tuple[int, ...]
    checkpoint_root: Path
    learner: LearnerConfig
    centre: torch.Tensor = field(compare=False, repr=False)
    device: str = "auto"
    window: int = 1024
    checkpoint_every: int = 8192
    keep: int = 5

    @property
    def group(self) -> str:
        return group_name(self.partitions)


@dataclass(frozen=True)
class WorkerStatus:
    group: str
    device: str
    offsets: dict[int, int]
    items: int
    applied: int
    skipped: int
    bad: int
    checkpoints: int
    digests: dict[str, str]
    node: str = ""
    """The Ray node id the worker runs on ("" outside Ray)."""


class ConsolidationWorker:
    """Pulls feed records of its partitions, applies them to its learners, checkpoints."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        device = config.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        self.bank = LearnerBank(config.learner, config.centre, device)
        self.store = CheckpointStore(config.checkpoint_root / config.group, config.keep)
        self.offsets = {p: 0 for p in config.partitions}
        self.feed_log_time = 0.0
        latest = self.store.latest()
        if latest is not None:
            self.store.load(latest, self.bank, device)
            self.offsets.update({p: o for p, o in latest.offsets.items() if p in self.offsets})
            self.feed_log_time = latest.feed_log_time
            log.info("worker %s resumed from %s at %s", config.group, latest.path.name,
                     self.offsets)
        self._buffer: dict[int, list[Any]] = {p: [] for p in config.partitions}
        self._tps = {p: TopicPartition(config.topic, p) for p in config.partitions}
        self.consumer = open_consumer(config.bootstrap, max_poll_records=config.window)
        self.consumer.assign(list(self._tps.values()))
        for p, tp in self._tps.items():
            self.consumer.seek(tp, self.offsets[p])
        self.applied = self.skipped = self.bad = self.checkpoints = 0
        self._saved = dict(self.offsets)
        self._since_checkpoint = 0

    # -- the loop ---------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 200) -> int:
        """Fetch once and apply every complete window; on an empty fetch apply what is left."""
        batch = self.consumer.poll(timeout_ms=timeout_ms)
        for tp, messages in batch.items():
            self._buffer[tp.partition].extend(messages)
        got = sum(len(m) for m in batch.values())
        n = sum(self._apply_windows(p, flush=not got) for p in self.config.partitions)
        if self._since_checkpoint >= self.config.checkpoint_every and not self.buffered():
            self.checkpoint()
        return n

    def buffered(self) -> int:
        return sum(len(b) for b in self._buffer.values())

    def run(self, until: Mapping[int, int] | None = None, max_s: float | None = None,
            idle_ms: int = 200) -> WorkerStatus:
        """Poll until the applied offsets reach ``until`` or ``max_s`` passes (``until`` None:
        follow the feed live for ``max_s``); then checkpoint if anything changed."""
        started = time.monotonic()
        while until is None or not self._reached(until):
            if max_s is not None and time.monotonic() - started > max_s:
                break
            self.poll(idle_ms)
            if until is not None and self._positions_reached(until):
                for p in self.config.partitions:
                    self._apply_windows(p, flush=True)
        if self.offsets != self._saved or self.bank.dirty:
            self.checkpoint()
        return self.status()

    def _reached(self, stop: Mapping[int, int]) -> bool:
        return all(self.offsets[p] >= o for p, o in stop.items() if p in self.offsets)

    def run_to(self, stop: Mapping[int, int]) -> WorkerStatus:
        """Apply exactly the records before ``stop`` (window-aligned stops keep determinism)."""
        while any(self.offsets[p] < stop.get(p, 0) for p in self.offsets):
            batch = self.consumer.poll(timeout_ms=200)
            for tp, messages in batch.items():
                self._buffer[tp.partition].extend(messages)
            for p in self.config.partitions:
                self._apply_windows(p, flush=False, limit=stop.get(p, 0))
        return self.status()

    def _positions_reached(self, stop: Mapping[int, int]) -> bool:
        return all(self.consumer.position(self._tps[p]) >= o for p, o in stop.items()
                   if p in self._tps)

    def _apply_windows(self, partition: int, *, flush: bool, limit: int | None = None) -> int:
        buf, size, n = self._buffer[partition], self.config.window, 0
        while buf:
            boundary = (buf[0].offset // size + 1) * size
            if limit is not None:
                boundary = min(boundary, limit)
            cut = next((i for i, m in enumerate(buf) if m.offset >= boundary), len(buf))
            complete = cut < len(buf) or buf[-1].offset >= boundary - 1 or (
                self.consumer.position(self._tps[partition]) >= boundary)
            if cut == 0 or not (complete or flush):
                break
            n += self._apply(partition, buf[:cut])
            del buf[:cut]
        return n

    def _apply(self, partition: int, messages: list[Any]) -> int:
        records: list[FeedRecord] = []
        for m in messages:
            try:
                records.append(FeedRecord.from_bytes(m.value or b""))
            except ValueError as exc:
                self.bad += 1
                log.warning("feed %d@%d: %s (skipped)", partition, m.offset, exc)
        done = self.bank.apply(records, partition)
        self.offsets[partition] = next_offset(messages[-1].offset)
        self.feed_log_time = max(self.feed_log_time, messages[-1].timestamp / 1000.0)
        self.applied += done.written + done.removed
        self.skipped += done.skipped
        self._since_checkpoint += len(messages)
        return len(messages)

    # -- state --------------------------------------------------------------------------------

    def checkpoint(self) -> str:
        """Save learners + applied offsets atomically; return the checkpoint's name."""
        path = self.store.save(self.bank, self.offsets, self.feed_log_time)
        self._saved = dict(self.offsets)
        self.checkpoints += 1
        self._since_checkpoint = 0
        return path.name

    def end_offsets(self) -> dict[int, int]:
        ends = self.consumer.end_offsets(list(self._tps.values()))
        return {tp.partition: int(o) for tp, o in ends.items()}

    def status(self) -> WorkerStatus:
        return WorkerStatus(self.config.group, self.device, dict(self.offsets), self.bank.n_items,
                            self.applied, self.skipped, self.bad, self.checkpoints,
                            self.bank.digests(), ray_node_id())

    def close(self) -> None:
        self.consumer.close()


def ray_node_id() -> str:
    """The id of the Ray node this process runs on, or "" when Ray is not initialised here."""
    import ray

    return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else ""


def actor_class(num_gpus: float = 0.0) -> Any:
    """``ConsolidationWorker`` as a Ray actor class (one CPU, and a GPU when asked for)."""
    import ray

    return ray.remote(num_cpus=1, num_gpus=num_gpus, max_restarts=0)(ConsolidationWorker)


def assign_partitions(partitions: list[int], n_actors: int) -> list[tuple[int, ...]]:
    """Round-robin partitions over ``n_actors`` (fewer actors when there are fewer partitions)."""
    n = max(1, min(n_actors, len(partitions)))
    return [tuple(sorted(partitions[i::n])) for i in range(n)]


class BankApplier:
    """The worker's apply path without Kafka: raw feed record values in, learners updated.

    Used to measure an actor's update rate (``bench consolidate``) and to drive a bank from
    records already read elsewhere.
    """

    def __init__(self, config: LearnerConfig, centre: torch.Tensor, device: str = "cpu",
                 threads: int | None = None) -> None:
        if threads is not None:
            torch.set_num_threads(threads)
        self.bank = LearnerBank(config, centre, device)
        self.device = device

    def apply_raw(self, values: list[bytes]) -> int:
        done = self.bank.apply([FeedRecord.from_bytes(v) for v in values], 0)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return done.written + done.removed

    def digests(self) -> dict[str, str]:
        return self.bank.digests()

    def predict(self, shard: str, cues: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
        """``W φ(cue)`` of ``shard``'s learner for ``[B, dim_in]`` cues (closed-book read)."""
        learner = self._learner(shard)
        out: npt.NDArray[np.float64] = learner.predict(torch.from_numpy(cues)).cpu().numpy()
        return out

    def weights(self, shard: str) -> npt.NDArray[np.float64]:
        """``W = (A + λI)⁻¹ C`` of ``shard``'s learner as of now."""
        out: npt.NDArray[np.float64] = self._learner(shard).weights().cpu().numpy()
        return out

    def snapshot(self, shard: str) -> bytes:
        """``shard``'s learner as checkpoint bytes (``checkpoint.restore`` reads them)."""
        from memstack.operators.consolidation import checkpoint

        return checkpoint.snapshot(self._learner(shard), {"shard": shard})

    def _learner(self, shard: str) -> RidgeLearner:
        learner = self.bank.learners.get(shard)
        if learner is None:
            raise KeyError(f"no learner for shard {shard!r}: nothing was written to it")
        return learner

    def threads(self) -> int:
        """Torch's intra-op threads here (Ray sets OMP_NUM_THREADS to the actor's num_cpus)."""
        return int(torch.get_num_threads())


def applier_class(num_gpus: float = 0.0) -> Any:
    import ray

    return ray.remote(num_cpus=1, num_gpus=num_gpus, max_restarts=0)(BankApplier)
