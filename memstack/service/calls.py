"""The calls of the memstack HTTP API as data: one :class:`Call` per operation, no I/O.

:class:`Calls` turns arguments into a :class:`Call` (method, path, query, body and how to parse
the answer); the sync and async clients in :mod:`memstack.service.client` only send them, so
the two cannot drift. :func:`answer` maps an HTTP answer to its value or its typed error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Generic, TypeVar

import httpx
from pydantic import TypeAdapter

from memstack.foundation.builders import checked_all
from memstack.schemas.events import Event, ForgetScope, format_time
from memstack.service.config import ServiceConfig
from memstack.service.types import (
    Change,
    ForgetReceipt,
    ForgetStatus,
    ServiceUnavailableError,
    WriteReceipt,
    error_for,
)
from memstack.view.reads import READS, Operation
from memstack.view.types import (
    Context,
    FactsAnswer,
    HistoryAnswer,
    RecordsAnswer,
    SearchAnswer,
    SearchMode,
)

T = TypeVar("T")
Time = datetime | date | str
"""A time argument: an aware datetime, a date (midnight UTC), RFC 3339 text, or ``now``."""
After = str | WriteReceipt | ForgetReceipt
"""A position to wait for: a token, or the receipt of a write or forget."""


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP request of the API and the parser of its answer."""

    method: str
    path: str
    parse: Callable[[bytes], T]
    params: dict[str, Any] | None = None
    body: Any = None


FilterArg = Mapping[str, Any] | str | None
"""A metadata filter as a client takes it: its JSON object or its JSON text."""


def filter_param(value: FilterArg) -> str | None:
    """The query parameter of a filter: its JSON text (the service validates it)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def time_param(value: Time | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetime: give times with a zone (datetime(..., tzinfo=UTC))")
        return format_time(value)
    return value.isoformat()


def position_of(value: After | None) -> str | None:
    return value if value is None or isinstance(value, str) else value.position


def _model(cls: type[T]) -> Callable[[bytes], T]:
    return TypeAdapter(cls).validate_json


class Calls:
    """The API's calls for one tenant (paths under ``/v1/tenants/{tenant}/``)."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.prefix = f"/v1/tenants/{config.tenant}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}

    def write(self, events: Sequence[Event | dict[str, Any]]) -> Call[WriteReceipt]:
        batch = checked_all(events)  # all validated before anything is sent
        body = {"events": [e.model_dump(mode="json", exclude_none=True) for e in batch]}
        return Call("POST", f"{self.prefix}/events", _model(WriteReceipt), body=body)

    def forget(self, scope: ForgetScope | dict[str, Any],
               reason: str | None) -> Call[ForgetReceipt]:
        checked = scope if isinstance(scope, ForgetScope) else ForgetScope.model_validate(scope)
        body: dict[str, Any] = {"scope": checked.model_dump(exclude_none=True)}
        if reason is not None:
            body["reason"] = reason
        return Call("POST", f"{self.prefix}/forget", _model(ForgetReceipt), body=body)

    def forget_status(self, request_id: str) -> Call[ForgetStatus]:
        return Call("GET", f"{self.prefix}/forget/{request_id}", _model(ForgetStatus))

    def facts(self, subject: str | None, relation: str | None, valid: Time | None,
              known: Time | None, after: After | None) -> Call[FactsAnswer]:
        return self._read("facts", after, valid=valid, known=known, subject=subject,
                          relation=relation)

    def history(self, subject: str, relation: str | None, valid: Time | None,
                known: Time | None, after: After | None) -> Call[HistoryAnswer]:
        return self._read("history", after, valid=valid, known=known, subject=subject,
                          relation=relation)

    def search(self, text: str, k: int, kinds: Sequence[str], session: str | None,
               subject: str | None, mode: SearchMode, valid: Time | None,
               known: Time | None, after: After | None, *,
               filter: FilterArg = None) -> Call[SearchAnswer]:
        return self._read("search", after, valid=valid, known=known, text=text, k=k,
                          kinds=list(kinds), session=session, subject=subject, mode=mode,
                          filter=filter_param(filter))

    def records(self, session: str | None, start: Time | None, end: Time | None,
                limit: int | None, valid: Time | None, known: Time | None,
                after: After | None, *, filter: FilterArg = None) -> Call[RecordsAnswer]:
        return self._read("records", after, valid=valid, known=known, session=session,
                          start=time_param(start), end=time_param(end), limit=limit,
                          filter=filter_param(filter))

    def context(self, text: str, budget_tokens: int, session: str | None,
                subject: str | None, valid: Time | None, known: Time | None,
                after: After | None, *, filter: FilterArg = None) -> Call[Context]:
        return self._read("context", after, valid=valid, known=known, text=text,
                          budget_tokens=budget_tokens, session=session, subject=subject,
                          filter=filter_param(filter))

    def _read(self, op: Operation, after: After | None, *, valid: Time | None,
              known: Time | None, **args: Any) -> Call[Any]:
        """A read as its declaration names it (:mod:`memstack.view.reads`); the service
        validates the values, so a bad one answers its 422 as for any other client."""
        declared = READS[op]
        params = declared.params.model_construct(
            valid=time_param(valid), known=time_param(known), **args)
        query = params.model_dump(mode="json", by_alias=True, exclude_none=True)
        if position_of(after) is not None:
            query["after"] = position_of(after)
        return Call("GET", f"{self.prefix}/{op}", _model(declared.answer),
                    {k: v for k, v in query.items() if v != []})

    def changes(self, since: After | None) -> Call[bytes]:
        params = {"from": position_of(since)} if since is not None else None
        return Call("GET", f"{self.prefix}/changes", bytes, params)

    def unreachable(self, exc: httpx.HTTPError) -> ServiceUnavailableError:
        return ServiceUnavailableError(
            f"cannot reach the memstack service at {self.config.url}: {exc}; start it with "
            "`memstack serve` or pass the right url (MEMSTACK_URL)")


def answer(response: httpx.Response, parse: Callable[[bytes], T]) -> T:
    """The parsed answer, or the typed error of a 4xx/5xx with the service's detail."""
    if response.status_code >= 400:
        try:
            body = response.json()
            detail = _problem_detail(body) if isinstance(body, dict) else body
        except ValueError:
            detail = response.text
        where = f"{response.request.method} {response.request.url.path}"
        raise error_for(response.status_code, detail, where)
    return parse(response.content)


_PROBLEM_MEMBERS = ("type", "title", "status", "detail", "instance", "field", "errors")


def _problem_detail(body: dict[str, Any]) -> Any:
    """A problem document's detail, with its extension members (``behind``, ``written``...)
    as ``{"message": detail, ...}``; any other body's ``detail``."""
    detail = body.get("detail", body)
    extra = {k: v for k, v in body.items() if k not in _PROBLEM_MEMBERS}
    if "type" in body and "status" in body and extra:
        return {"message": detail, **extra}
    return detail


def parse_sse(lines: Iterator[str]) -> Iterator[Change]:
    """Server-sent events (``id:``, ``event:``, ``data:`` lines; a blank line ends one)."""
    fields: dict[str, str] = {}
    data: list[str] = []
    for line in lines:
        if not line:
            if data or fields:
                yield _change(fields, data)
            fields, data = {}, []
            continue
        if line.startswith(":"):
            continue  # a comment (keep-alive)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name in ("id", "event"):
            fields[name] = value
    if data or fields:
        yield _change(fields, data)


def _change(fields: dict[str, str], data: list[str]) -> Change:
    text = "\n".join(data)
    try:
        payload: Any = json.loads(text) if text else None
    except ValueError:
        payload = text
    return Change(id=fields.get("id"), event=fields.get("event"), data=payload)
