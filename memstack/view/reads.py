"""The read operations, declared once: their names, parameters, limits and answers.

``facts``, ``history``, ``search``, ``records`` and ``context`` each have one parameter model
here. Every face of memory is made from it or checked against it:

- the HTTP routes of the service and of the shard router are generated from :data:`READS`
  (``memstack.server.read_routes``): the models are their query parameters, so names,
  defaults, limits and descriptions are the OpenAPI's;
- the view runs a model (:func:`memstack.view.ops.execute`), the CLI builds one
  (``memstack query``), and the HTTP clients send one (:mod:`memstack.service.calls`);
- the clients' methods (``MemoryService``, ``AsyncMemoryService``), the MCP backend and the MCP
  tools take the same parameters with the same defaults, plus ``after``
  (``tests/view/test_reads_declared_once.py`` checks every one of them against the models).

Times and positions stay text here (RFC 3339, a date, ``now``, or a log position): the view
parses them (:func:`memstack.view.asof.parse_time`), so each face accepts what the others do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from memstack.schemas.filters import MAX_TEXT as MAX_FILTER
from memstack.schemas.filters import FilterError, parse_filter
from memstack.view.types import (
    Answer,
    Context,
    FactsAnswer,
    HistoryAnswer,
    RecordsAnswer,
    SearchAnswer,
    SearchMode,
)

MAX_NAME = 256
"""The longest tenant, subject, relation or session (as the event schema's names)."""
MAX_TOKEN = 4096
"""The longest time, log position or position token a query may pass."""
MAX_TEXT = 10_000
"""The longest search or context text."""
MAX_RECORDS = 10_000
"""The most records one ``records`` answer may hold (``limit=``)."""
MAX_K = 1000
"""The most hits one search may ask for."""
MAX_KINDS = 16
"""The most ``kind`` filters one search may pass."""
MAX_BUDGET = 1_000_000
"""The largest token budget of a context."""

Operation = Literal["facts", "history", "search", "records", "context"]


def _filter_text(value: Any) -> Any:
    """A filter given as an object (MCP, Python) becomes its JSON text, as HTTP carries it."""
    if isinstance(value, Mapping):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


def _checked_filter(text: str | None) -> str | None:
    if text is not None:
        try:
            parse_filter(text)
        except FilterError as exc:
            raise ValueError(str(exc)) from None
    return text


FilterParam = Annotated[str | None, BeforeValidator(_filter_text),
                        AfterValidator(_checked_filter)]
"""A metadata filter (:mod:`memstack.schemas.filters`): JSON text (an object is turned into it)."""
FILTER_DESCRIPTION = (
    'Metadata filter as JSON: {"topic": "x"}, {"score": {"gte": 3}}, {"tags": {"contains": '
    '"a"}}, {"lang": {"in": ["en", "pt"]}}, and/or/not; operators eq ne in nin gt gte lt lte '
    "contains (docs/queries.md, Filters)")


class AsOfParams(BaseModel):
    """Where in time a read looks: valid time and transaction time (both default to now)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    valid: str | None = Field(None, max_length=MAX_TOKEN,
                              description="Valid time (RFC 3339, a date, or now)")
    known: str | None = Field(None, max_length=MAX_TOKEN, description=(
        "Transaction time (RFC 3339 or now) or log position 'partition:next_offset,...'"))


class FactsParams(AsOfParams):
    subject: str | None = Field(None, max_length=MAX_NAME, description="Fact subject")
    relation: str | None = Field(None, max_length=MAX_NAME, description="Fact relation")


class HistoryParams(AsOfParams):
    subject: str = Field(max_length=MAX_NAME, description="Fact subject")
    relation: str | None = Field(None, max_length=MAX_NAME, description="Fact relation")


class SearchParams(AsOfParams):
    text: str = Field(min_length=1, max_length=MAX_TEXT, description="What to look for")
    k: int = Field(10, ge=1, le=MAX_K, description="How many hits")
    kinds: list[str] | None = Field(None, alias="kind", max_length=MAX_KINDS, description=(
        "Only rows of these kinds (message, tool_call, tool_result, observation, note); "
        "repeatable"))
    session: str | None = Field(None, max_length=MAX_NAME, description="Session id")
    subject: str | None = Field(None, max_length=MAX_NAME, description="Fact subject")
    mode: SearchMode = Field("hybrid", description="hybrid (BM25 + vector, fused), bm25 or "
                                                   "vector")
    filter: FilterParam = Field(None, max_length=MAX_FILTER, description=FILTER_DESCRIPTION)


class RecordsParams(AsOfParams):
    session: str | None = Field(None, max_length=MAX_NAME, description="Session id")
    start: str | None = Field(None, max_length=MAX_TOKEN, description="occurred at or after")
    end: str | None = Field(None, max_length=MAX_TOKEN, description="occurred before")
    limit: int | None = Field(None, ge=1, le=MAX_RECORDS, description="At most this many")
    filter: FilterParam = Field(None, max_length=MAX_FILTER, description=FILTER_DESCRIPTION)


class ContextParams(AsOfParams):
    text: str = Field(min_length=1, max_length=MAX_TEXT, description="What the context is for")
    budget_tokens: int = Field(2000, ge=1, le=MAX_BUDGET, description="The token budget")
    session: str | None = Field(None, max_length=MAX_NAME, description="Session id")
    subject: str | None = Field(None, max_length=MAX_NAME, description="Fact subject")
    filter: FilterParam = Field(None, max_length=MAX_FILTER, description=FILTER_DESCRIPTION)


ReadParams = FactsParams | HistoryParams | SearchParams | RecordsParams | ContextParams


@dataclass(frozen=True)
class ReadOperation:
    """One read: its parameters, its answer, what it does, and whether it embeds a text."""

    name: Operation
    params: type[ReadParams]
    answer: type[Answer]
    summary: str
    heavy: bool = False
    """Embeds the query's text: counts as a search for the stores gate."""


READS: dict[Operation, ReadOperation] = {op.name: op for op in (
    ReadOperation("facts", FactsParams, FactsAnswer,
                  "Fact values valid at ``valid`` as known at ``known`` (both default to now)."),
    ReadOperation("history", HistoryParams, HistoryAnswer,
                  "Every version of a subject's facts with both intervals, as the timeline was "
                  "known."),
    ReadOperation("search", SearchParams, SearchAnswer,
                  "Hybrid search (BM25 + vector, fused) over the rows that answer as of; with "
                  "provenance.", heavy=True),
    ReadOperation("records", RecordsParams, RecordsAnswer, "Raw records in log order."),
    ReadOperation("context", ContextParams, Context,
                  "A prompt-ready context under a token budget, with provenance per item.",
                  heavy=True),
)}
"""Every read operation, by name (the HTTP path, the CLI's ``memstack query OP``)."""

OPERATIONS: tuple[Operation, ...] = tuple(READS)
