"""Projection through the forget ledger: sealed payloads opened, forgotten events never applied.

:class:`ForgettingProjector` wraps any :class:`Projector` (the :class:`StoreProjector`): before
``prepare`` it opens sealed records with the key store, drops records whose key was destroyed
(:class:`Shredded`) and events the ledger covers, and still advances the stores' offsets past
the dropped records. :func:`rebuild_forgetting` is the simple bounded rebuild through it (the
same loop as :func:`memstack.pipelines.rebuild.rebuild`, which takes no record filter yet).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

from memstack.keystore import KeyStore
from memstack.operators.relations import RelationRegistry
from memstack.pipelines.contracts import Plan, Projector
from memstack.pipelines.embedding import Encoder, shared_encoder
from memstack.pipelines.forgetting.ledger import ForgetLedger
from memstack.pipelines.log_reader import LogRecord, end_offsets, read_bounded
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.rebuild import batches
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.sealed import SealedEvent, parse_record
from memstack.sealing import Shredded, open_sealed

log = logging.getLogger(__name__)


@dataclass
class FilterStats:
    forgotten: int = 0
    shredded: int = 0
    opened: int = 0


class ForgettingProjector:
    """A :class:`Projector` that applies only what the forget ledger and the keys allow."""

    def __init__(self, inner: Projector, ledger: ForgetLedger,
                 keys: KeyStore | None = None) -> None:
        self.inner, self.ledger, self.keys = inner, ledger, keys
        self.stats = FilterStats()

    def applied_offsets(self) -> dict[int, int]:
        return self.inner.applied_offsets()

    def prepare(self, records: list[LogRecord]) -> Plan:
        applied = self.inner.applied_offsets()
        kept: list[LogRecord] = []
        skipped: dict[int, int] = {}
        for record in records:
            opened = self._opened(record)
            if opened is None:
                pos = record.position
                if pos.offset >= applied.get(pos.partition, 0):
                    skipped[pos.partition] = max(skipped.get(pos.partition, 0), pos.offset + 1)
                continue
            kept.append(opened)
        plan = self.inner.prepare(kept)
        offsets = dict(plan.next_offsets)
        for partition, offset in skipped.items():
            offsets[partition] = max(offsets.get(partition, 0), offset)
        return replace(plan, next_offsets=offsets)

    def _opened(self, record: LogRecord) -> LogRecord | None:
        """The record with its payload in the clear; None when it must not be applied."""
        if record.value is None:
            return record
        try:
            parsed = parse_record(record.value)
        except InvalidEventError:
            return record  # the projector dead-letters it with the reason
        if isinstance(parsed, SealedEvent):
            if self.keys is None:
                return record  # dead-lettered: "sealed event but no key store"
            opened = open_sealed(parsed, self.keys, record.value)
            if isinstance(opened, Shredded):
                self.stats.shredded += 1
                return None
            self.stats.opened += 1
            event = opened
            record = replace(record, value=event.to_json())
        else:
            event = parsed
        if self.ledger.covers(event, record.position.log_time):
            self.stats.forgotten += 1
            return None
        return record

    def commit(self, plan: Plan) -> None:
        self.inner.commit(plan)

    def close(self) -> None:
        self.inner.close()


@dataclass(frozen=True)
class ForgettingRebuild:
    directory: Path
    records: int
    applied: int
    forgotten: int
    shredded: int
    seconds: float
    content_hash: str


def rebuild_forgetting(bootstrap: str, topic: str, into_dir: Path, ledger: ForgetLedger,
                       keys: KeyStore | None = None, *, encoder: Encoder | None = None,
                       registry: RelationRegistry | None = None,
                       batch: int = 2000) -> ForgettingRebuild:
    """Rebuild ``into_dir`` from offset 0 (or where it ends) through the ledger and the keys."""
    began = time.monotonic()
    stop = end_offsets(bootstrap, topic)
    with Stores.open(into_dir) as stores:
        inner = StoreProjector(stores, encoder or shared_encoder(), topic, registry)
        projector = ForgettingProjector(inner, ledger, keys)
        start = projector.applied_offsets()
        records = applied = 0
        for chunk in batches(read_bounded(bootstrap, topic, start, stop), batch):
            plan = projector.prepare(chunk)
            projector.commit(plan)
            records += len(chunk)
            applied += len(plan.events)
        stores.vectors.maintain()
        result = ForgettingRebuild(Path(into_dir), records, applied, projector.stats.forgotten,
                                   projector.stats.shredded, time.monotonic() - began,
                                   stores.content_hash())
    log.info("rebuild through the forget ledger: %d records, %d applied, %d forgotten, "
             "%d shredded in %.1f s", records, applied, result.forgotten, result.shredded,
             result.seconds)
    return result
