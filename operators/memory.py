"""The memory operator: a logged event in, the mutations of the external-memory indexes out.

Records (message, tool_call, tool_result, observation, note) go to :mod:`records`; facts
(fact_asserted, fact_retracted) to the bitemporal :class:`FactOperator`. Forget requests are not
handled here (the tombstone operator turns them into ``forget`` calls).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import ClassVar

from memstack.operators.facts import EntryLoader, FactOperator, FactSnapshot, fact_entry
from memstack.operators.log import LoggedEvent
from memstack.operators.mutations import FactEntry, Mutation
from memstack.operators.records import record_mutations
from memstack.operators.relations import RelationRegistry
from memstack.operators.timeline import FactKey
from memstack.schemas.events import TEXT_KINDS, EventKind

log = logging.getLogger(__name__)

FACT_KINDS = frozenset({EventKind.FACT_ASSERTED, EventKind.FACT_RETRACTED})


class MemoryOperator:
    """Stateful over fact keys only (records are stateless); see :class:`FactOperator`."""

    id: ClassVar[str] = "index"
    """Stable operator id: its state key, its Flink ``uid()``, its log field."""

    def __init__(
        self, registry: RelationRegistry | None = None, loader: EntryLoader | None = None
    ) -> None:
        self.facts = FactOperator(registry, loader)

    def apply(self, logged: LoggedEvent) -> list[Mutation]:
        return self.apply_batch([logged])

    def apply_batch(self, events: Iterable[LoggedEvent]) -> list[Mutation]:
        """Mutations for a batch: records in batch order, then facts grouped per key.

        Facts of one key are recomputed once per batch, so a batch costs no more than its
        events one by one; the resulting stores are the same either way.
        """
        out: list[Mutation] = []
        entries: list[FactEntry] = []
        for logged in events:
            kind = logged.event.kind
            if kind in TEXT_KINDS:
                out.extend(record_mutations(logged))
            elif kind in FACT_KINDS:
                entries.append(fact_entry(logged))
            else:
                log.debug("index: skipping %s event %s", kind, logged.event.event_id)
        out.extend(self.facts.apply_entries(entries))
        return out

    def forget(self, event_ids: Iterable[str], keys: Iterable[FactKey] = ()) -> list[Mutation]:
        """Fact mutations that erase these events' entries (records are the forget sink's)."""
        return self.facts.forget(event_ids, keys)

    def snapshot(self) -> FactSnapshot:
        return self.facts.snapshot()

    def restore(self, snapshot: FactSnapshot) -> None:
        self.facts.restore(snapshot)
