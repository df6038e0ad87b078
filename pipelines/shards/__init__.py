"""Sharded live workers: one store shard per partition of ``<prefix>.events`` (docs/scaling.md).

``layout`` names the directories and the worker cards, ``projector`` applies batches to the
shards a worker owns, ``reads`` answers the router's per-shard requests, ``api`` serves them.
"""
