"""The HTTP side of the facade: the service's API over the view (``memstack serve``), the
memory inspector, the read API of a shard worker and the router that answers over all shards.

It stands on :mod:`memstack.view` (the read side) and :mod:`memstack.pipelines` (the worker it
is served beside); nothing below it imports it (``tests/test_import_graph.py``).
"""
