"""A sharded worker's shard API: the router's requests, answered from the shards it owns.

``GET /shard/status`` says which partitions the worker owns, each shard's applied offset and
which shards are still catching up; ``POST /shard/{partition}/{read}`` runs one read
(:class:`~.reads.ShardReader`) on that partition's shard, or answers **409** when the worker
does not own it (any more): the router then reports the partition missing, never a silently
partial answer. No API keys here: the router checks them; the shard API listens on loopback
unless told otherwise (``--shard-host``), and across machines belongs on a private network.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from fastapi import Body, FastAPI, HTTPException
from fastapi.responses import JSONResponse

from memstack.operators.mutations import FactEntry, MemoryRow, RecordRow
from memstack.pipelines.shards.projector import ShardedProjector
from memstack.pipelines.stores.bundle import Stores
from memstack.server.shards import wire
from memstack.server.shards.reads import ShardReader, ShardSearch
from memstack.view.errors import ViewError
from memstack.view.filtering import as_filter


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _reads(reader: ShardReader) -> dict[str, Callable[[Stores, dict[str, Any]], Any]]:
    def records(stores: Stores, body: dict[str, Any]) -> Any:
        rows = reader.records(stores, body["tenant"], wire.as_of_from(body["as_of"]),
                              body.get("session"), _time(body.get("start")),
                              _time(body.get("end")), as_filter(body.get("filter")))
        return wire.dump(rows, list[RecordRow])

    def fact_entries(stores: Stores, body: dict[str, Any]) -> Any:
        entries = reader.fact_entries(stores, body["tenant"], body.get("subject"),
                                      body.get("relation"))
        return wire.dump(entries, list[FactEntry])

    def rows(stores: Stores, body: dict[str, Any]) -> Any:
        return wire.dump(reader.rows(stores, body["tenant"], body["ids"]), list[MemoryRow])

    def search(stores: Stores, body: dict[str, Any]) -> Any:
        found = reader.search(stores, body["tenant"], wire.as_of_from(body["as_of"]),
                              body["text"], int(body["n"]), kinds=body.get("kinds"),
                              session=body.get("session"), subject=body.get("subject"),
                              mode=body.get("mode", "hybrid"),
                              filter=as_filter(body.get("filter")))
        return wire.dump(found, ShardSearch)

    return {"records": records, "fact_entries": fact_entries, "rows": rows, "search": search}


def shard_app(sharded: ShardedProjector, reader: ShardReader, worker: str) -> FastAPI:
    app = FastAPI(title="memstack shard API", description=__doc__)
    reads = _reads(reader)

    @app.get("/shard/status")
    def status() -> dict[str, Any]:
        with sharded.gate.reading():
            return {"worker": worker, "partitions": sharded.applied_offsets(),
                    "catching_up": sharded.catching_up()}

    @app.post("/shard/{partition}/{read}")
    def read(partition: int, read: str, body: dict[str, Any] = Body(...)) -> Any:  # noqa: B008
        run = reads.get(read)
        if run is None:
            raise HTTPException(404, f"no shard read {read!r}; use one of {sorted(reads)}")
        with sharded.gate.reading():
            shard = sharded.shard(partition)
            if shard is None:
                raise HTTPException(409, f"worker {worker} does not own partition {partition}")
            return {"partition": partition, "applied": shard.applied(),
                    "result": run(shard.stores, body)}

    @app.exception_handler(ViewError)
    def _view(_: Any, exc: ViewError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    return app
