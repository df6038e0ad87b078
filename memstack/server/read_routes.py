"""The read routes, made once from their declaration, for the service and the shard router.

Each operation of :data:`memstack.view.reads.READS` becomes ``GET /v1/tenants/{tenant}/<op>``
whose query parameters are the operation's parameter model (names, defaults, limits and
descriptions in one place). What differs between the apps is only who answers: a dependency
that authorizes the key, waits for ``after=`` and returns a :class:`ReadAnswerer` (the
service's reader under the stores gate, or the router's fan-out over the shards).

No ``from __future__ import annotations`` here: the routes' signatures are built from the
models at run time and FastAPI reads them as objects.
"""

import inspect
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, Query, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import TypeAdapter

from memstack.view.ops import Query as ReadQuery
from memstack.view.reads import READS, ReadOperation, ReadParams

PREFIX = "/v1/tenants/{tenant}"


class ReadAnswerer(Protocol):
    """One tenant's reads as one app answers them (blocking: run off the event loop)."""

    def run(self, query: ReadQuery) -> Any: ...


def add_read_routes(app: FastAPI, answerer: Callable[..., Any], *, typed_answers: bool,
                    responses: dict[int | str, dict[str, Any]] | None = None) -> None:
    """Add every read route; ``answerer`` is the app's dependency returning a
    :class:`ReadAnswerer`; ``typed_answers`` publishes each operation's answer model."""
    for operation in READS.values():
        _add(app, operation, answerer, typed_answers, responses)


def _add(app: FastAPI, operation: ReadOperation, answerer: Callable[..., Any],
         typed_answers: bool, responses: dict[int | str, dict[str, Any]] | None) -> None:
    name = operation.name
    answers = TypeAdapter(operation.answer) if typed_answers else None

    async def route(params: ReadParams, reader: ReadAnswerer) -> Any:
        query = ReadQuery.of(name, params)
        if answers is None:
            return await run_in_threadpool(reader.run, query)
        return await run_in_threadpool(_answered, answers, reader, query)

    keyword = inspect.Parameter.KEYWORD_ONLY
    route.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("params", keyword, annotation=Annotated[operation.params, Query()]),
        inspect.Parameter("reader", keyword,
                          annotation=Annotated[ReadAnswerer, Depends(answerer)])])
    route.__name__ = route.__qualname__ = name
    route.__doc__ = operation.summary
    app.get(f"{PREFIX}/{name}", tags=["query"], responses=responses,
            response_model=operation.answer if typed_answers else None)(route)


def _answered(answers: TypeAdapter[Any], reader: ReadAnswerer, query: ReadQuery) -> Response:
    """``query`` answered and serialised in the worker thread, in one pass: the answer is
    already of the operation's type, so FastAPI's validation of it against the response
    model (a second pass over every hit, on the event loop) is skipped. The bytes are
    pydantic's JSON of that type, as FastAPI's would be; the OpenAPI contract is unchanged."""
    return Response(answers.dump_json(reader.run(query)), media_type="application/json")

