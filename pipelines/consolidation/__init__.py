"""Consolidation on Ray: the feed, the learner bank, the actors, checkpoints, the job, forget.

Data flow: the live pipeline commits a batch -> :class:`FeedProducer` derives feed items from
its fact-version mutations (:func:`feed_items`, pure), distils them (:class:`StoreTeacher`) and
produces them to ``<prefix>.consolidation`` -> :class:`ConsolidationWorker` actors (Ray) apply
them to one learner per shard and checkpoint by log position -> ``memstack.view.recall`` reads
the weights as of a time. See docs/consolidation.md.
"""

from memstack.pipelines.consolidation.feed import (
    BROADCAST,
    FeedItem,
    FeedRecord,
    Sharding,
    feed_items,
    partition_of,
    write_item,
)

__all__ = [
    "BROADCAST",
    "FeedItem",
    "FeedRecord",
    "Sharding",
    "feed_items",
    "partition_of",
    "write_item",
]
