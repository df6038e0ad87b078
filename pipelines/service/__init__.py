"""The live service: one process that owns the stores, applies the log and answers HTTP.

``memstack serve`` runs the Faust live worker and a uvicorn server on one asyncio loop
(see docs/service.md): writes are produced to Kafka and acknowledged with a position token,
reads wait for a token with ``after=``, forgets are applied between batches while reads are
held back, and a change feed publishes what each commit changed.
"""
