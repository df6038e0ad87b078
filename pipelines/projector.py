"""``StoreProjector``: log records in, DuckDB and LanceDB writes out, exactly-once in effect.

``prepare`` parses, drops what the stores already hold (offsets below the applied ones), runs
the pure :class:`MemoryOperator` (fact keys seeded from the stored entries, cached in memory)
and computes the next offsets: steps 1-3 of the commit path. :meth:`StoreProjector.write`
writes LanceDB first (merge by id, the plan's vectors), then the DuckDB transaction with the
offsets: a crash in between re-reads the batch, and the Lance merge is a no-op the second time.
``commit`` runs the whole order, :class:`~memstack.pipelines.commit_path.CommitPath` (here with
no session state and no feed). See docs/stores.md.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from memstack.foundation.keystore import KeyStore
from memstack.foundation.log_coordinates import advance, raise_to
from memstack.foundation.sealing import Shredded, open_record
from memstack.operators.log import LoggedEvent
from memstack.operators.memory import FACT_KINDS, MemoryOperator
from memstack.operators.mutations import FactEntry
from memstack.operators.relations import RelationRegistry
from memstack.operators.timeline import FactKey
from memstack.pipelines.commit_path import CommitPath, memory_rows
from memstack.pipelines.contracts import DeadLetter, ForgetFilter, Plan
from memstack.pipelines.embedding import Encoder, record_encoder
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event, FactAssertedPayload, FactRetractedPayload

log = logging.getLogger(__name__)

MAX_CACHED_KEYS = 100_000
"""Fact keys kept in memory; the least recently used are evicted and re-read when needed."""


def fact_key(event: Event) -> FactKey | None:
    payload = event.payload
    if isinstance(payload, FactAssertedPayload | FactRetractedPayload) and event.subject:
        return FactKey(event.tenant, event.subject, payload.relation)
    return None


@dataclass
class SkipStats:
    """Events a projector read and did not apply: forgotten by the ledger, or shredded (their
    data key destroyed)."""

    forgotten: int = 0
    shredded: int = 0


class StoreProjector:
    """The :class:`~memstack.pipelines.contracts.Projector` over a :class:`Stores` bundle.

    The one forget filter of every projection (live, replay, rebuild): sealed records are
    opened with ``keys``, shredded ones and events ``forgotten`` covers are not applied, and
    the offsets still move past them (:attr:`skipped` counts them)."""

    def __init__(self, stores: Stores, encoder: Encoder, topic: str,
                 registry: RelationRegistry | None = None, *,
                 max_cached_keys: int = MAX_CACHED_KEYS, maintain_indexes: bool = True,
                 maintain_in_background: bool = False, keys: KeyStore | None = None,
                 forgotten: ForgetFilter | None = None) -> None:
        if encoder.dim != stores.vectors.dim:
            raise ValueError(f"encoder {encoder.name} gives {encoder.dim}-dim vectors, the "
                             f"vector index holds {stores.vectors.dim}; use a matching encoder")
        if not stores.read_only:  # the stores say which encoder built them (docs/replay.md)
            record_encoder(stores.directory, encoder, has_vectors=stores.vectors.count() > 0)
        self.stores = stores
        self.encoder = encoder
        self.topic = topic
        self._registry = registry or RelationRegistry()
        self._max_keys = max_cached_keys
        self._maintain = maintain_indexes
        self._in_background = maintain_in_background
        """Index maintenance in the vector index's own thread (the live worker's), so no batch
        waits for it; else in the store thread after each merge that makes it due."""
        self._keys = keys
        self.forgotten = forgotten
        """The forget ledger: events it covers are never applied (live or replay)."""
        self.skipped = SkipStats()
        self._applied = stores.events.applied_offsets(topic)
        self._reset_operator()

    def _reset_operator(self) -> None:
        self._index = MemoryOperator(self._registry, loader=self._load_key)
        self._cached: OrderedDict[FactKey, None] = OrderedDict()
        self._prefetched: dict[FactKey, list[FactEntry]] = {}

    def applied_offsets(self) -> dict[int, int]:
        return dict(self._applied)

    def reopen(self, stores: Stores) -> None:
        """Continue on freshly opened stores (after a forget compacted the files): offsets are
        re-read and the fact cache dropped, since it may hold entries that were forgotten."""
        self.stores = stores
        self._applied = stores.events.applied_offsets(self.topic)
        self._reset_operator()

    def prepare(self, records: list[LogRecord]) -> Plan:
        events: list[LoggedEvent] = []
        dead: list[DeadLetter] = []
        next_offsets: dict[int, int] = {}
        seen: set[tuple[int, int]] = set()
        for record in records:
            pos = record.position
            if pos.offset < self._applied.get(pos.partition, 0) or (
                (pos.partition, pos.offset) in seen
            ):
                continue
            seen.add((pos.partition, pos.offset))
            advance(next_offsets, pos.partition, pos.offset)
            try:
                event = open_record(record.value or b"null", self._keys)
            except InvalidEventError as exc:
                dead.append(DeadLetter(record.topic, pos.partition, pos.offset, record.key,
                                       record.value, exc.rule, exc.field))
                continue
            if isinstance(event, Shredded):
                self.skipped.shredded += 1  # its data key was destroyed by a forget request
                continue
            if self.forgotten is not None and self.forgotten.covers(event, pos.log_time):
                self.skipped.forgotten += 1
                continue
            events.append(LoggedEvent(event, pos))
        self._prefetch(events)
        mutations = self._index.apply_batch(events)
        log.debug("prepared %d records: %d events, %d dead, %d mutations", len(records),
                  len(events), len(dead), len(mutations))
        return Plan(events, mutations, dead, next_offsets)

    def commit(self, plan: Plan) -> None:
        """The commit path with no optional steps: vectors, stores, offsets (CommitPath)."""
        CommitPath(self).commit(plan)

    def write(self, plan: Plan) -> None:
        """Lance first (idempotent merge, the plan's vectors), then DuckDB rows and offsets in
        one transaction (the commit path's step 6)."""
        try:
            memories = memory_rows(plan)
            if memories:
                vectors = np.stack([plan.vectors[row.text] for row in memories])
                self.stores.vectors.merge(memories, vectors,
                                          maintain=self._maintain and not self._in_background)
                if self._maintain and self._in_background:
                    self.stores.vectors.maintain_soon()
            if plan.mutations or plan.next_offsets:
                self.stores.events.apply(plan.mutations, plan.next_offsets, topic=self.topic)
        except BaseException:
            # The operator state ran ahead of the stores: forget it, re-seed from the stores.
            self._reset_operator()
            raise

    def advance(self, next_offsets: dict[int, int]) -> None:
        """The applied offsets move on after a committed batch (the commit path's step 7)."""
        for partition, next_ in next_offsets.items():
            raise_to(self._applied, partition, next_)

    def close(self) -> None:
        """Releases nothing: the caller owns the stores (and closes them)."""

    # -- fact key cache ------------------------------------------------------------------

    def _prefetch(self, events: Iterable[LoggedEvent]) -> None:
        """Read the stored entries of every uncached key of the batch in one query."""
        keys = {k for e in events if e.event.kind in FACT_KINDS
                if (k := fact_key(e.event)) is not None}
        for key in keys & self._cached.keys():
            self._cached.move_to_end(key)
        missing = keys - self._cached.keys()
        if missing:
            self._prefetched = self.stores.events.fact_entries(missing)
        for key in missing:
            self._cached[key] = None
        while len(self._cached) > self._max_keys:
            old, _ = self._cached.popitem(last=False)
            self._index.facts.evict(old)

    def _load_key(self, key: FactKey) -> list[FactEntry]:
        entries = self._prefetched.pop(key, None)
        if entries is None:
            entries = self.stores.events.fact_entries([key])[key]
        return entries
