"""A projector that also feeds consolidation: commit the batch, then publish its feed items.

Order: the stores commit first, because the teacher reads the current facts from them. A crash
between the two loses that batch's feed items (the stores already hold the batch, so it is not
re-read); ``memstack consolidate --backfill`` re-derives the writes from the stores.
"""

from __future__ import annotations

import logging

from memstack.pipelines.consolidation.producer import FeedProducer
from memstack.pipelines.contracts import Plan, Projector
from memstack.pipelines.log_reader import LogRecord

log = logging.getLogger(__name__)


class FeedingProjector:
    """Wraps a :class:`Projector`; after each commit, publishes the consolidation feed."""

    def __init__(self, inner: Projector, feed: FeedProducer) -> None:
        self.inner = inner
        self.feed = feed

    @property
    def encoder(self) -> object:
        """The inner projector's encoder (the session state shares it)."""
        return getattr(self.inner, "encoder", None)

    def applied_offsets(self) -> dict[int, int]:
        return self.inner.applied_offsets()

    def prepare(self, records: list[LogRecord]) -> Plan:
        return self.inner.prepare(records)

    def commit(self, plan: Plan) -> None:
        self.inner.commit(plan)
        if plan.mutations:
            published = self.feed.publish(plan.mutations)
            log.debug("consolidation feed: %d items (%d writes, %d removals)", published.items,
                      published.writes, published.removals)

    def close(self) -> None:
        self.inner.close()



