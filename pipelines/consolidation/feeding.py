"""The commit path's consolidation-feed step: after the stores commit, publish the feed items.

Order: the stores commit first, because the teacher reads the current facts from them. A crash
between the two loses that batch's feed items (the stores already hold the batch, so it is not
re-read); ``memstack consolidate --backfill`` re-derives the writes from the stores. The feed
embeds its cues itself, each text alone (``distill.StoreTeacher.embed``: a vector must not
depend on the batch), so it does not use the plan's batch vectors.
"""

from __future__ import annotations

import logging

from memstack.pipelines.consolidation.producer import FeedProducer
from memstack.pipelines.contracts import Plan
from memstack.pipelines.stores.bundle import Stores

log = logging.getLogger(__name__)


class FeedStep:
    """Step 8 of :class:`~memstack.pipelines.commit_path.CommitPath`: publish the consolidation
    feed of each committed batch."""

    def __init__(self, feed: FeedProducer) -> None:
        self.feed = feed
        self.writes_total = 0
        """Learner writes published since start (``memstack_consolidation_updates_total``)."""
        self.removals_total = 0

    def apply(self, plan: Plan) -> None:
        if plan.mutations:
            published = self.feed.publish(plan.mutations)
            self.writes_total += published.writes
            self.removals_total += published.removals
            log.debug("consolidation feed: %d items (%d writes, %d removals)", published.items,
                      published.writes, published.removals)

    def follow(self, stores: Stores) -> None:
        """Read the current facts from ``stores`` (after a forget reopened them, or a switch)."""
        self.feed.distiller.teacher.events = stores.events
