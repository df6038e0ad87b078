"""The query operations as data: one :class:`Query` in, one answer out, JSON both ways.

The CLI (local stores or ``--url``), the HTTP service and the shard router run the same
operations, declared once in :mod:`memstack.view.reads`, through :func:`execute`, and render
answers through :func:`to_json`, so the faces cannot drift.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from memstack.view.asof import parse_time
from memstack.view.errors import InvalidQueryError
from memstack.view.memory_view import MemoryView
from memstack.view.reads import (
    OPERATIONS,
    READS,
    ContextParams,
    FactsParams,
    HistoryParams,
    Operation,
    ReadParams,
    RecordsParams,
    SearchParams,
)
from memstack.view.types import (
    Answer,
    FactsAnswer,
    HistoryAnswer,
    RecordsAnswer,
    SearchAnswer,
)


class Query:
    """One read: the operation and its parameters (:mod:`memstack.view.reads`), validated.

    ``Query("search", valid, known, text="basil", k=5)``; times and positions as users type
    them. A parameter the operation does not take, or a value out of its limits, raises
    :class:`InvalidQueryError` naming it.
    """

    __slots__ = ("op", "params")

    def __init__(self, op: Operation, valid: str | None = None, known: str | None = None,
                 **args: Any) -> None:
        if op not in READS:
            raise InvalidQueryError(f"unknown operation {op!r}; use one of {OPERATIONS}")
        model = READS[op].params
        unknown = sorted(set(args) - set(model.model_fields))
        if unknown:
            raise InvalidQueryError(f"'{op}' takes no {', '.join(unknown)}; it takes "
                                    f"{', '.join(model.model_fields)}")
        try:
            self.params: ReadParams = model(valid=valid, known=known, **args)
        except ValidationError as exc:
            raise InvalidQueryError(_explained(op, exc)) from exc
        self.op: Operation = op

    @classmethod
    def of(cls, op: Operation, params: ReadParams) -> Query:
        """A query from an already validated parameter model (an HTTP route's)."""
        query = cls.__new__(cls)
        query.op, query.params = op, params
        return query

    def params_json(self) -> dict[str, Any]:
        """The HTTP query parameters of this query (``None`` and empty lists left out)."""
        data = self.params.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {k: v for k, v in data.items() if v != []}

    def __repr__(self) -> str:
        return f"Query({self.op!r}, {self.params!r})"


def _explained(op: str, exc: ValidationError) -> str:
    parts = [f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return f"'{op}': " + "; ".join(parts)


def _time(value: str | None, name: str) -> datetime | None:
    return None if value is None else parse_time(value, name)


def execute(memory: MemoryView, query: Query) -> Answer:
    """Run one query on a tenant's memory."""
    p = query.params
    view = memory.as_of(p.valid, p.known)
    info = view.as_of.describe()
    if isinstance(p, FactsParams):
        return FactsAnswer(info, view.facts(p.subject, p.relation))
    if isinstance(p, HistoryParams):
        return HistoryAnswer(info, view.history(p.subject, p.relation))
    if isinstance(p, SearchParams):
        hits = view.search(p.text, p.k, kinds=p.kinds or None, session=p.session,
                           subject=p.subject, mode=p.mode, filter=p.filter)
        return SearchAnswer(info, p.mode, hits)
    if isinstance(p, RecordsParams):
        rows = view.records(p.session, _time(p.start, "start"), _time(p.end, "end"), p.limit,
                            filter=p.filter)
        return RecordsAnswer(info, rows)
    if isinstance(p, ContextParams):
        return view.context(p.text, p.budget_tokens, session=p.session, subject=p.subject,
                            filter=p.filter)
    raise InvalidQueryError(f"unknown parameters {type(p).__name__}")


def to_json(answer: Answer) -> dict[str, Any]:
    """The answer as JSON-ready data (times as RFC 3339 strings), as the HTTP service sends."""
    data: dict[str, Any] = TypeAdapter(type(answer)).dump_python(answer, mode="json")
    return data
