"""The live write path as one object: :class:`CommitPath`, its steps numbered in their order.

``prepare`` (on the store thread; the engine then sends the dead letters and waits for the acks):

1. **decode**: parse every record, open sealed ones with the key store; a record that fails
   validation becomes a dead letter, a shredded one (its data key destroyed) is skipped;
   records below the stores' applied offsets are dropped;
2. **forget filter**: events the forget ledger covers are not applied (the offsets still move
   past them);
3. **operators**: the pure :class:`~memstack.operators.memory.MemoryOperator` turns the events
   into mutations (fact keys seeded from the stores).

``commit`` (on the store thread, after the DLQ acknowledged the batch's dead letters):

4. **vectors**: every text the batch embeds (its memory texts, and the session state's key and
   value texts when that step is on) is encoded once, in one call, and carried in the plan
   (:attr:`Plan.vectors`); texts the plan already carries (a replay's parallel stage) are not
   encoded again. The session state and LanceDB add the very same vectors, which a forget later
   reads back from LanceDB to subtract exactly the terms the state added. Encoding stays on the
   store thread, never on the worker's event loop;
5. **session state** (optional, live workers): the touched sessions' snapshots are staged on the
   store thread, sent on the event loop and acknowledged *before* the stores commit. Each
   snapshot carries the offsets it applied, so a crash after this step re-reads the batch and
   the state skips it; the other order could leave the stores' offsets ahead of the state,
   whose batch would then never be read again;
6. **stores**: LanceDB first (merge by id), then the DuckDB rows and the next offsets in one
   transaction. A crash in between re-reads the batch, and the Lance merge is a no-op the
   second time; a failure drops the operator state (it ran ahead of the stores);
7. **offsets**: the projector's applied offsets move on (``prepare`` skips below them);
8. **consolidation feed** (optional): the batch's fact changes are published *after* the stores
   committed, because the feed's teacher reads the current facts from them. A crash between 6
   and 8 loses that batch's feed items (the stores hold the batch, so it is not re-read);
   ``memstack consolidate --backfill`` re-derives them from the stores.

The optional steps are typed attributes (:attr:`CommitPath.state`, :attr:`CommitPath.feed`,
None when absent): the worker, its metrics and its forget and switch hooks ask the commit path
for them. A :class:`~memstack.pipelines.projector.StoreProjector` used alone (rebuild, replay,
shards, a switch's catch-up) commits through a commit path with neither. See docs/stores.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from memstack.operators.mutations import MemoryRow, PutMemory
from memstack.pipelines.contracts import Plan
from memstack.pipelines.log_reader import LogRecord

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from memstack.pipelines.consolidation.feeding import FeedStep
    from memstack.pipelines.embedding import Encoder
    from memstack.pipelines.projector import StoreProjector
    from memstack.pipelines.session_state.projector import SessionStateStep

log = logging.getLogger(__name__)


@dataclass
class VectorCounts:
    """Texts of the vectors step since start: handed in with the plan, or encoded here."""

    given: int = 0
    encoded: int = 0


def memory_rows(plan: Plan) -> list[MemoryRow]:
    """The memory rows the batch writes to LanceDB (each needs its text's vector)."""
    return [m.row for m in plan.mutations if isinstance(m, PutMemory)]


def encode_new(encoder: Encoder, texts: Sequence[str],
               carried: Mapping[str, npt.NDArray[np.float32]]
               ) -> dict[str, npt.NDArray[np.float32]]:
    """The vectors of the ``texts`` that ``carried`` lacks: each distinct text once, in one
    call (none when nothing is new)."""
    missing = [t for t in dict.fromkeys(texts) if t not in carried]
    return dict(zip(missing, encoder.encode(missing), strict=True)) if missing else {}


class CommitPath:
    """The :class:`~memstack.pipelines.contracts.Projector` of one stores directory: the store
    projector's steps plus the optional session-state and feed steps, in the module's order."""

    def __init__(self, store: StoreProjector, *, state: SessionStateStep | None = None,
                 feed: FeedStep | None = None,
                 on_close: Callable[[], None] | None = None) -> None:
        self.store = store
        """Steps 1-3 (``prepare``), 6 and 7 (:meth:`StoreProjector.write`, ``advance``)."""
        self.state = state
        """Step 5, the session state (None: off; the live worker adds it)."""
        self.feed = feed
        """Step 8, the consolidation feed (None: off)."""
        self.on_close = on_close
        """What closing also does (the replay's writer builds indexes, closes its stores)."""
        self.vector_counts = VectorCounts()

    @property
    def encoder(self) -> Encoder:
        """The encoder of step 4 (the store projector's)."""
        return self.store.encoder

    def applied_offsets(self) -> dict[int, int]:
        return self.store.applied_offsets()

    def prepare(self, records: list[LogRecord]) -> Plan:
        """Steps 1-3: decode, forget filter, operators (:meth:`StoreProjector.prepare`)."""
        return self.store.prepare(records)

    def commit(self, plan: Plan) -> None:
        """Steps 4-8, in this order; see the module docstring for why."""
        plan = self.vectors(plan)  # 4. each text encoded once, carried in the plan
        if self.state is not None:
            self.state.apply(plan)  # 5. snapshots acknowledged before the stores commit
        self.store.write(plan)  # 6. Lance merge, then DuckDB rows + offsets in one transaction
        self.store.advance(plan.next_offsets)  # 7. the applied offsets move on
        if self.feed is not None:
            self.feed.apply(plan)  # 8. after the stores: the teacher reads the current facts

    def vectors(self, plan: Plan) -> Plan:
        """Step 4: ``plan`` carrying a vector for every text the later steps embed."""
        texts = self.state.texts(plan.events) if self.state is not None else []
        texts += [row.text for row in memory_rows(plan)]
        encoded = encode_new(self.store.encoder, texts, plan.vectors)
        self.vector_counts.given += len(set(texts)) - len(encoded)
        self.vector_counts.encoded += len(encoded)
        return replace(plan, vectors={**plan.vectors, **encoded}) if encoded else plan

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            if self.on_close is not None:
                self.on_close()

