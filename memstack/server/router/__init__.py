"""The router of a sharded deployment: any query for a tenant, over every shard (docs/scaling.md).

``fanout`` finds the workers and which partitions each owns, ``view`` answers the query kinds
by merging the shards' parts, ``app`` serves them over HTTP (``memstack shards router``).
"""
