"""A projector that also feeds consolidation: commit the batch, then publish its feed items.

Order: the stores commit first, because the teacher reads the current facts from them. A crash
between the two loses that batch's feed items (the stores already hold the batch, so it is not
re-read); ``memstack consolidate --backfill`` re-derives the writes from the stores.
"""

from __future__ import annotations

import logging

from memstack.pipelines.consolidation.producer import FeedProducer
from memstack.pipelines.contracts import Plan, Projector, WrappingProjector

log = logging.getLogger(__name__)


class FeedingProjector(WrappingProjector):
    """Wraps a :class:`Projector`; after each commit, publishes the consolidation feed."""

    def __init__(self, inner: Projector, feed: FeedProducer) -> None:
        super().__init__(inner)
        self.feed = feed
        self.writes_total = 0
        """Learner writes published since start (``memstack_consolidation_updates_total``)."""
        self.removals_total = 0

    def commit(self, plan: Plan) -> None:
        self.inner.commit(plan)
        if plan.mutations:
            published = self.feed.publish(plan.mutations)
            self.writes_total += published.writes
            self.removals_total += published.removals
            log.debug("consolidation feed: %d items (%d writes, %d removals)", published.items,
                      published.writes, published.removals)
