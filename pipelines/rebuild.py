"""Rebuild stores from the log: a single-process, bounded replay through the projector.

Simple and deterministic: read ``topic`` from ``start`` (default: where the stores' offsets
end, so a rebuild resumes) to ``stop`` (default: the end offsets now), in batches, through the
same :class:`StoreProjector` as the live pipeline. Dead letters are counted and logged, not
re-sent (the live pipeline already sent them to the DLQ). The PyFlink replay is the scale-out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from memstack.foundation.keystore import KeyStore
from memstack.operators.relations import RelationRegistry
from memstack.pipelines.contracts import ForgetFilter
from memstack.pipelines.embedding import Encoder, shared_encoder
from memstack.pipelines.log_reader import LogRecord, end_offsets, read_bounded
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.bundle import Stores

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True)
class RebuildResult:
    """What a rebuild read and where the stores now end."""

    directory: Path
    records: int
    events: int
    dead_letters: int
    next_offsets: dict[int, int]
    seconds: float
    content_hash: str
    forgotten: int = 0
    """Events the forget ledger covers, read and not applied."""
    shredded: int = 0
    """Sealed events whose data key was destroyed, read and not applied."""


def batches(records: Iterable[LogRecord], size: int) -> Iterator[list[LogRecord]]:
    """Consecutive lists of ``size`` records (the last one shorter)."""
    batch: list[LogRecord] = []
    for record in records:
        batch.append(record)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def rebuild(
    bootstrap: str,
    topic: str,
    into_dir: Path,
    start: Mapping[int, int] | None = None,
    stop: Mapping[int, int] | None = None,
    batch: int = 2000,
    *,
    encoder: Encoder | None = None,
    registry: RelationRegistry | None = None,
    keys: KeyStore | None = None,
    forgotten: ForgetFilter | None = None,
) -> RebuildResult:
    """Replay ``topic`` into the stores at ``into_dir`` (created when missing)."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    began = time.monotonic()
    stop = dict(stop) if stop is not None else end_offsets(bootstrap, topic)
    with Stores.open(into_dir) as stores:
        projector = StoreProjector(stores, encoder or shared_encoder(), topic, registry,
                                   keys=keys, forgotten=forgotten)
        applied = projector.applied_offsets()
        first = {p: max((start or {}).get(p, 0), applied.get(p, 0)) for p in stop}
        log.info("rebuild %s into %s: from %s to %s", topic, into_dir, first, stop)
        records = events = dead = 0
        last_report = began
        for chunk in batches(read_bounded(bootstrap, topic, first, stop), batch):
            plan = projector.prepare(chunk)
            projector.commit(plan)
            records += len(chunk)
            events += len(plan.events)
            dead += len(plan.dead_letters)
            for letter in plan.dead_letters:
                log.warning("rebuild: dead letter at %d/%d: %s (%s)", letter.partition,
                            letter.offset, letter.reason, letter.field)
            if time.monotonic() - last_report >= PROGRESS_EVERY_S:
                last_report = time.monotonic()
                _progress(records, last_report - began, projector.applied_offsets(), stop)
        stores.vectors.maintain()
        projector.close()
        result = RebuildResult(Path(into_dir), records, events, dead,
                               projector.applied_offsets(), time.monotonic() - began,
                               stores.content_hash(), projector.skipped.forgotten,
                               projector.skipped.shredded)
    log.info("rebuild done: %d records (%d events, %d dead) in %.1f s", records, events, dead,
             result.seconds)
    return result


def _progress(records: int, elapsed: float, at: Mapping[int, int],
              stop: Mapping[int, int]) -> None:
    total = sum(stop.values()) - sum(min(at.get(p, 0), s) for p, s in stop.items())
    rate = records / elapsed if elapsed > 0 else 0.0
    eta = total / rate if rate > 0 else float("inf")
    log.info("rebuild: %d records, %.0f/s, offsets %s of %s, ETA %.0f s", records, rate,
             dict(at), dict(stop), eta)
