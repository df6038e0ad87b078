"""The light HTTP client of a running memstack service: writes, reads, forget, ``after=``.

``MemoryService(url, api_key, tenant=...)`` posts events built by the same
:class:`~memstack.builders.EventBuilder` as ``MemoryClient`` (validated before anything is
sent), and reads the as-of views. A write answers with a position token; pass it (or the
receipt) as ``after=`` to any read to see your own write. ``AsyncMemoryService`` is the same
on ``httpx.AsyncClient``. Errors are typed by status (:mod:`memstack.service_types`).

>>> with MemoryService("http://127.0.0.1:8765", "key", tenant="acme") as memory:  # doctest: +SKIP
...     receipt = memory.fact("s1", "user:ana", "lives_in", "Porto")
...     memory.facts(subject="user:ana", after=receipt).facts[0].object
'Porto'
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from datetime import date, datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from pydantic import TypeAdapter

from memstack.builders import Defaults, EventBuilder, EventHelpers, checked_all
from memstack.schemas.events import Event, ForgetScope, format_time
from memstack.service_config import ServiceConfig
from memstack.service_types import (
    Change,
    ForgetReceipt,
    ForgetStatus,
    ServiceUnavailableError,
    WriteReceipt,
    error_for,
)
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

DEFAULT_TIMEOUT = 60.0


def _time(value: Time | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetime: give times with a zone (datetime(..., tzinfo=UTC))")
        return format_time(value)
    return value.isoformat()


def _after(value: After | None) -> str | None:
    return value if value is None or isinstance(value, str) else value.position


def _params(valid: Time | None, known: Time | None, after: After | None,
            **args: Any) -> dict[str, Any]:
    out = {"valid": _time(valid), "known": _time(known), "after": _after(after), **args}
    return {k: v for k, v in out.items() if v is not None and v != []}


class Requests:
    """The transport-free half shared by the sync and async clients: paths and answers."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.prefix = f"/v1/tenants/{config.tenant}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}

    def events_body(self, events: Sequence[Event | dict[str, Any]]) -> dict[str, Any]:
        batch = checked_all(events)
        return {"events": [e.model_dump(mode="json", exclude_none=True) for e in batch]}

    @staticmethod
    def forget_body(scope: ForgetScope | dict[str, Any], reason: str | None) -> dict[str, Any]:
        checked = scope if isinstance(scope, ForgetScope) else ForgetScope.model_validate(scope)
        body: dict[str, Any] = {"scope": checked.model_dump(exclude_none=True)}
        if reason is not None:
            body["reason"] = reason
        return body

    def answer(self, response: httpx.Response, parse: Callable[[bytes], T]) -> T:
        """The parsed answer, or the typed error of a 4xx/5xx with the service's detail."""
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            where = f"{response.request.method} {response.request.url.path}"
            raise error_for(response.status_code, detail, where)
        return parse(response.content)

    def unreachable(self, exc: httpx.HTTPError) -> ServiceUnavailableError:
        return ServiceUnavailableError(
            f"cannot reach the memstack service at {self.config.url}: {exc}; start it with "
            "`memstack serve` or pass the right url (MEMSTACK_URL)")


def _model(cls: type[T]) -> Callable[[bytes], T]:
    adapter = TypeAdapter(cls)
    return adapter.validate_json


class _Reads(EventHelpers[T]):
    """The read and forget calls, written once over ``_call`` (sync or async)."""

    requests: Requests

    def _call(self, method: str, path: str, parse: Callable[[bytes], Any], *,
              params: dict[str, Any] | None = None, body: Any = None) -> Any:
        raise NotImplementedError

    def facts(self, subject: str | None = None, relation: str | None = None, *,
              valid: Time | None = None, known: Time | None = None,
              after: After | None = None) -> Any:
        """Fact values valid at ``valid`` as known at ``known`` (both default to now)."""
        return self._call("GET", "facts", _model(FactsAnswer), params=_params(
            valid, known, after, subject=subject, relation=relation))

    def history(self, subject: str, relation: str | None = None, *, valid: Time | None = None,
                known: Time | None = None, after: After | None = None) -> Any:
        """Every version of a subject's facts with both intervals."""
        return self._call("GET", "history", _model(HistoryAnswer), params=_params(
            valid, known, after, subject=subject, relation=relation))

    def search(self, text: str, k: int = 10, *, kinds: Sequence[str] = (),
               session: str | None = None, subject: str | None = None,
               mode: SearchMode = "hybrid", valid: Time | None = None,
               known: Time | None = None, after: After | None = None) -> Any:
        """Hybrid (BM25 + vector) search over the memory as of, with provenance."""
        return self._call("GET", "search", _model(SearchAnswer), params=_params(
            valid, known, after, text=text, k=k, kind=list(kinds), session=session,
            subject=subject, mode=mode))

    def records(self, session: str | None = None, *, start: Time | None = None,
                end: Time | None = None, limit: int | None = None, valid: Time | None = None,
                known: Time | None = None, after: After | None = None) -> Any:
        """Raw records in log order."""
        return self._call("GET", "records", _model(RecordsAnswer), params=_params(
            valid, known, after, session=session, start=_time(start), end=_time(end),
            limit=limit))

    def context(self, text: str, budget_tokens: int = 2000, *, session: str | None = None,
                subject: str | None = None, valid: Time | None = None,
                known: Time | None = None, after: After | None = None) -> Any:
        """A prompt-ready context under a token budget, with provenance per item."""
        return self._call("GET", "context", _model(Context), params=_params(
            valid, known, after, text=text, budget_tokens=budget_tokens, session=session,
            subject=subject))

    def forget(self, scope: ForgetScope | dict[str, Any], reason: str | None = None) -> Any:
        """Ask the service to forget a scope; the receipt's id finds its audit."""
        return self._call("POST", "forget", _model(ForgetReceipt),
                          body=self.requests.forget_body(scope, reason))

    def forget_status(self, request_id: str) -> Any:
        """Where a forget request stands, with the per-store audit."""
        return self._call("GET", f"forget/{request_id}", _model(ForgetStatus))

    def emit_many(self, events: Sequence[Event | dict[str, Any]]) -> Any:
        """Write a batch in one request (all validated before it is sent)."""
        return self._call("POST", "events", _model(WriteReceipt),
                          body=self.requests.events_body(events))

    def emit(self, event: Event | dict[str, Any]) -> Any:
        return self.emit_many([event])

    def _send(self, event: Event) -> T:
        result: T = self.emit_many([event])
        return result


class MemoryService(_Reads[WriteReceipt]):
    """A blocking client of one tenant's memory on a running service.

    ``url``, ``api_key`` and ``tenant`` default to ``MEMSTACK_URL`` (or the service found
    through ``$MEMSTACK_HOME/service.json``), ``MEMSTACK_API_KEY`` and ``MEMSTACK_TENANT``.
    Helpers (``message``, ``fact``, ...) write one event each and return a
    :class:`WriteReceipt`; reads return the query layer's answer types.
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *,
                 tenant: str | None = None, agent: str = "memstack-sdk",
                 source: str = "memstack-http", timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None) -> None:
        config = ServiceConfig.resolve(url, api_key, tenant)
        self.requests = Requests(config)
        self.events = EventBuilder(Defaults(tenant=config.tenant, agent=agent, source=source))
        self._http = httpx.Client(base_url=config.url, headers=self.requests.headers(),
                                  timeout=timeout, transport=transport)

    @property
    def tenant(self) -> str:
        return self.requests.config.tenant

    def _call(self, method: str, path: str, parse: Callable[[bytes], Any], *,
              params: dict[str, Any] | None = None, body: Any = None) -> Any:
        try:
            response = self._http.request(method, f"{self.requests.prefix}/{path}",
                                          params=params, json=body)
        except httpx.HTTPError as exc:
            raise self.requests.unreachable(exc) from exc
        return self.requests.answer(response, parse)

    def changes(self, since: After | None = None) -> Iterator[Change]:
        """The change feed from a position on (server-sent events), until closed."""
        params = {"from": _after(since)} if since is not None else None
        try:
            with self._http.stream("GET", f"{self.requests.prefix}/changes", params=params,
                                   timeout=httpx.Timeout(None, connect=10.0)) as response:
                if response.status_code >= 400:
                    response.read()
                    self.requests.answer(response, bytes)
                yield from parse_sse(response.iter_lines())
        except httpx.HTTPError as exc:
            raise self.requests.unreachable(exc) from exc

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class AsyncMemoryService(_Reads[Coroutine[Any, Any, WriteReceipt]]):
    """:class:`MemoryService` on ``httpx.AsyncClient``: every call is a coroutine."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *,
                 tenant: str | None = None, agent: str = "memstack-sdk",
                 source: str = "memstack-http", timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        config = ServiceConfig.resolve(url, api_key, tenant)
        self.requests = Requests(config)
        self.events = EventBuilder(Defaults(tenant=config.tenant, agent=agent, source=source))
        self._http = httpx.AsyncClient(base_url=config.url, headers=self.requests.headers(),
                                       timeout=timeout, transport=transport)

    @property
    def tenant(self) -> str:
        return self.requests.config.tenant

    def _call(self, method: str, path: str, parse: Callable[[bytes], Any], *,
              params: dict[str, Any] | None = None, body: Any = None) -> Awaitable[Any]:
        return self._acall(method, path, parse, params, body)

    async def _acall(self, method: str, path: str, parse: Callable[[bytes], Any],
                     params: dict[str, Any] | None, body: Any) -> Any:
        try:
            response = await self._http.request(method, f"{self.requests.prefix}/{path}",
                                                params=params, json=body)
        except httpx.HTTPError as exc:
            raise self.requests.unreachable(exc) from exc
        return self.requests.answer(response, parse)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


def parse_sse(lines: Iterator[str]) -> Iterator[Change]:
    """Server-sent events (``id:``, ``event:``, ``data:`` lines, blank line ends one)."""
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
    import json

    text = "\n".join(data)
    try:
        payload: Any = json.loads(text) if text else None
    except ValueError:
        payload = text
    return Change(id=fields.get("id"), event=fields.get("event"), data=payload)
