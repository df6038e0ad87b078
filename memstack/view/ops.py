"""The query operations as data: one :class:`Query` in, one answer out, JSON both ways.

The CLI (local stores or ``--url``) and the HTTP service run the same operations through
:func:`execute`, and render answers through :func:`to_json`, so the three faces cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import TypeAdapter

from memstack.view.asof import parse_time
from memstack.view.errors import InvalidQueryError
from memstack.view.memory_view import MemoryView
from memstack.view.types import (
    Answer,
    FactsAnswer,
    HistoryAnswer,
    RecordsAnswer,
    SearchAnswer,
    SearchMode,
)

Operation = Literal["facts", "history", "search", "records", "context"]
OPERATIONS: tuple[Operation, ...] = ("facts", "history", "search", "records", "context")


@dataclass(frozen=True)
class Query:
    """One query: the operation, its as-of coordinates (strings as users type them) and args."""

    op: Operation
    valid: str | None = None
    known: str | None = None
    subject: str | None = None
    relation: str | None = None
    text: str | None = None
    k: int = 10
    kinds: tuple[str, ...] = field(default=())
    session: str | None = None
    mode: SearchMode = "hybrid"
    start: str | None = None
    end: str | None = None
    limit: int | None = None
    budget_tokens: int = 2000

    def params(self) -> dict[str, Any]:
        """The HTTP query parameters of this query (``None`` and defaults left out)."""
        out: dict[str, Any] = {}
        for name in ("valid", "known", "subject", "relation", "text", "session", "start", "end",
                     "limit"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.op == "search":
            out.update(k=self.k, mode=self.mode)
            if self.kinds:
                out["kind"] = list(self.kinds)
        if self.op == "context":
            out["budget_tokens"] = self.budget_tokens
        return out


def _time(value: str | None, name: str) -> datetime | None:
    return None if value is None else parse_time(value, name)


def _need(value: str | None, name: str, op: str) -> str:
    if not value:
        raise InvalidQueryError(f"'{op}' needs --{name}")
    return value


def execute(memory: MemoryView, query: Query) -> Answer:
    """Run one query on a tenant's memory."""
    view = memory.as_of(query.valid, query.known)
    info = view.as_of.describe()
    if query.op == "facts":
        return FactsAnswer(info, view.facts(query.subject, query.relation))
    if query.op == "history":
        subject = _need(query.subject, "subject", "history")
        return HistoryAnswer(info, view.history(subject, query.relation))
    if query.op == "search":
        text = _need(query.text, "text", "search")
        hits = view.search(text, query.k, kinds=query.kinds or None, session=query.session,
                           subject=query.subject, mode=query.mode)
        return SearchAnswer(info, query.mode, hits)
    if query.op == "records":
        rows = view.records(query.session, _time(query.start, "start"), _time(query.end, "end"),
                            query.limit)
        return RecordsAnswer(info, rows)
    if query.op == "context":
        text = _need(query.text, "text", "context")
        return view.context(text, query.budget_tokens, session=query.session,
                            subject=query.subject)
    raise InvalidQueryError(f"unknown operation {query.op!r}; use one of {OPERATIONS}")


def to_json(answer: Answer) -> dict[str, Any]:
    """The answer as JSON-ready data (times as RFC 3339 strings), as the HTTP service sends."""
    data: dict[str, Any] = TypeAdapter(type(answer)).dump_python(answer, mode="json")
    return data
