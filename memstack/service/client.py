"""The light HTTP client of a running memstack service: writes, reads, forget, ``after=``.

``MemoryService(url, api_key, tenant=...)`` posts events built by the same
:class:`~memstack.foundation.builders.EventBuilder` as ``MemoryClient`` (validated before
anything is sent) and reads the as-of views. A write answers with a position token; pass it (or the
receipt) as ``after=`` to any read to see your own write. ``AsyncMemoryService`` is the same
on ``httpx.AsyncClient``. Requests are built once in :mod:`memstack.service.calls`; errors are
typed by status (:mod:`memstack.service.types`). See docs/client.md.

>>> with MemoryService("http://127.0.0.1:8765", "key", tenant="acme") as memory:  # doctest: +SKIP
...     receipt = memory.fact("s1", "user:ana", "lives_in", "Porto")
...     memory.facts("user:ana", after=receipt).facts[0].object
'Porto'
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import httpx

from memstack.foundation.builders import Defaults, EventBuilder, EventHelpers
from memstack.foundation.telemetry import MemoryTracer, memory_tracer, note_result
from memstack.schemas.events import Event, ForgetScope
from memstack.service.calls import After, Call, Calls, FilterArg, Time, answer, parse_sse
from memstack.service.config import ServiceConfig
from memstack.service.types import Change, ForgetReceipt, ForgetStatus, WriteReceipt
from memstack.view.types import (
    Context,
    FactsAnswer,
    HistoryAnswer,
    RecordsAnswer,
    SearchAnswer,
    SearchMode,
)

T = TypeVar("T")
DEFAULT_TIMEOUT = 60.0
"""Seconds per request; above the service's ``after=`` wait, so a 504 arrives as an answer."""


Transport = TypeVar("Transport", httpx.BaseTransport, httpx.AsyncBaseTransport)
Http = TypeVar("Http", httpx.Client, httpx.AsyncClient)


class _ServiceClient(Generic[Transport, Http]):
    """What both service clients are built on: the resolved calls (url, key, tenant), the
    tracer and the tenant's event builder; each client opens its own httpx client (``_open``).
    """

    tracer: MemoryTracer | None
    """Spans per memory call when tracing is on (``MEMSTACK_OTEL=1``, docs/otel.md)."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *,
                 tenant: str | None = None, agent: str = "memstack-sdk",
                 source: str = "memstack-http", timeout: float = DEFAULT_TIMEOUT,
                 transport: Transport | None = None,
                 tracer_provider: Any = None) -> None:
        self.calls = Calls(ServiceConfig.resolve(url, api_key, tenant))
        self.tracer = memory_tracer(tracer_provider)
        self.events = EventBuilder(Defaults(tenant=self.tenant, agent=agent, source=source))
        self._http: Http = self._open(timeout, transport)

    def _open(self, timeout: float, transport: Transport | None) -> Http:
        raise NotImplementedError

    @property
    def tenant(self) -> str:
        return self.calls.config.tenant


class MemoryService(_ServiceClient[httpx.BaseTransport, httpx.Client],
                    EventHelpers[WriteReceipt]):
    """A blocking client of one tenant's memory on a running service.

    ``url``, ``api_key`` and ``tenant`` default to ``MEMSTACK_URL`` (or the service found
    through ``$MEMSTACK_HOME/service.json``), ``MEMSTACK_API_KEY`` and ``MEMSTACK_TENANT``.
    Helpers (``message``, ``tool_call``, ``tool_result``, ``observation``, ``note``, ``fact``,
    ``retract``) write one event each and return a :class:`WriteReceipt`.
    """

    def _open(self, timeout: float, transport: httpx.BaseTransport | None) -> httpx.Client:
        return httpx.Client(base_url=self.calls.config.url, headers=self.calls.headers(),
                            timeout=timeout, transport=transport)

    def _run(self, call: Call[T]) -> T:
        if self.tracer is not None:
            return _traced(self.tracer, self.tenant, call, self._request)
        return self._request(call, None)

    def _request(self, call: Call[T], headers: dict[str, str] | None) -> T:
        try:
            response = self._http.request(call.method, call.path, params=call.params,
                                          json=call.body, headers=headers)
        except httpx.HTTPError as exc:
            raise self.calls.unreachable(exc) from exc
        return answer(response, call.parse)

    def _send(self, event: Event) -> WriteReceipt:
        return self.emit_many([event])

    def emit(self, event: Event | dict[str, Any]) -> WriteReceipt:
        """Write one built event (or its JSON as a dict, validated first)."""
        return self.emit_many([event])

    def emit_many(self, events: Sequence[Event | dict[str, Any]]) -> WriteReceipt:
        """Write a batch in one request; all are validated before it is sent."""
        return self._run(self.calls.write(events))

    def forget(self, scope: ForgetScope | dict[str, Any],
               reason: str | None = None) -> ForgetReceipt:
        """Ask the service to forget a scope; ``after=`` the receipt no read returns it."""
        return self._run(self.calls.forget(scope, reason))

    def forget_status(self, request_id: str) -> ForgetStatus:
        """Where a forget request stands (logged, invisible, erased, audited), with its audit."""
        return self._run(self.calls.forget_status(request_id))

    def facts(self, subject: str | None = None, relation: str | None = None, *,
              valid: Time | None = None, known: Time | None = None,
              after: After | None = None) -> FactsAnswer:
        """Fact values valid at ``valid`` as known at ``known`` (both default to now)."""
        return self._run(self.calls.facts(subject, relation, valid, known, after))

    def history(self, subject: str, relation: str | None = None, *, valid: Time | None = None,
                known: Time | None = None, after: After | None = None) -> HistoryAnswer:
        """Every version of a subject's facts with both intervals."""
        return self._run(self.calls.history(subject, relation, valid, known, after))

    def search(self, text: str, k: int = 10, *, kinds: Sequence[str] = (),
               session: str | None = None, subject: str | None = None,
               mode: SearchMode = "hybrid", filter: FilterArg = None,
               valid: Time | None = None, known: Time | None = None,
               after: After | None = None) -> SearchAnswer:
        """Hybrid (BM25 + vector) search over the memory as of, with provenance; ``filter``
        keeps rows whose metadata passes it (``{"topic": "billing"}``, docs/queries.md)."""
        return self._run(self.calls.search(text, k, kinds, session, subject, mode, valid,
                                           known, after, filter=filter))

    def records(self, session: str | None = None, *, start: Time | None = None,
                end: Time | None = None, limit: int | None = None, filter: FilterArg = None,
                valid: Time | None = None, known: Time | None = None,
                after: After | None = None) -> RecordsAnswer:
        """Raw records in log order (occurred in ``[start, end)``, metadata passing
        ``filter``)."""
        return self._run(self.calls.records(session, start, end, limit, valid, known, after,
                                            filter=filter))

    def context(self, text: str, budget_tokens: int = 2000, *, session: str | None = None,
                subject: str | None = None, filter: FilterArg = None,
                valid: Time | None = None, known: Time | None = None,
                after: After | None = None) -> Context:
        """A prompt-ready context under a token budget, with provenance per item."""
        return self._run(self.calls.context(text, budget_tokens, session, subject, valid,
                                            known, after, filter=filter))

    def changes(self, since: After | None = None) -> Iterator[Change]:
        """The change feed after a position (default: from now on), until closed."""
        call = self.calls.changes(since)
        try:
            with self._http.stream(call.method, call.path, params=call.params,
                                   timeout=httpx.Timeout(None, connect=10.0)) as response:
                if response.status_code >= 400:
                    response.read()
                    answer(response, call.parse)
                yield from parse_sse(response.iter_lines())
        except httpx.HTTPError as exc:
            raise self.calls.unreachable(exc) from exc

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _traced(tracer: MemoryTracer, tenant: str, call: Call[T],
            request: Callable[[Call[T], dict[str, str] | None], T]) -> T:
    """``request(call)`` inside the call's span, its trace context sent along."""
    with tracer.call_span(tenant, call.method, call.path, call.params, call.body) as span:
        result = request(call, tracer.headers())
        note_result(span, result)
        return result


class AsyncMemoryService(_ServiceClient[httpx.AsyncBaseTransport, httpx.AsyncClient],
                         EventHelpers[Coroutine[Any, Any, WriteReceipt]]):
    """:class:`MemoryService` on ``httpx.AsyncClient``: the same calls, as coroutines."""

    def _open(self, timeout: float,
              transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.calls.config.url, headers=self.calls.headers(),
                                 timeout=timeout, transport=transport)

    async def _run(self, call: Call[T]) -> T:
        if self.tracer is None:
            return await self._request(call, None)
        with self.tracer.call_span(self.tenant, call.method, call.path, call.params,
                                   call.body) as span:
            result = await self._request(call, self.tracer.headers())
            note_result(span, result)
            return result

    async def _request(self, call: Call[T], headers: dict[str, str] | None) -> T:
        try:
            response = await self._http.request(call.method, call.path, params=call.params,
                                                json=call.body, headers=headers)
        except httpx.HTTPError as exc:
            raise self.calls.unreachable(exc) from exc
        return answer(response, call.parse)

    def _send(self, event: Event) -> Coroutine[Any, Any, WriteReceipt]:
        return self.emit_many([event])

    async def emit(self, event: Event | dict[str, Any]) -> WriteReceipt:
        return await self.emit_many([event])

    async def emit_many(self, events: Sequence[Event | dict[str, Any]]) -> WriteReceipt:
        return await self._run(self.calls.write(events))

    async def forget(self, scope: ForgetScope | dict[str, Any],
                     reason: str | None = None) -> ForgetReceipt:
        return await self._run(self.calls.forget(scope, reason))

    async def forget_status(self, request_id: str) -> ForgetStatus:
        return await self._run(self.calls.forget_status(request_id))

    async def facts(self, subject: str | None = None, relation: str | None = None, *,
                    valid: Time | None = None, known: Time | None = None,
                    after: After | None = None) -> FactsAnswer:
        return await self._run(self.calls.facts(subject, relation, valid, known, after))

    async def history(self, subject: str, relation: str | None = None, *,
                      valid: Time | None = None, known: Time | None = None,
                      after: After | None = None) -> HistoryAnswer:
        return await self._run(self.calls.history(subject, relation, valid, known, after))

    async def search(self, text: str, k: int = 10, *, kinds: Sequence[str] = (),
                     session: str | None = None, subject: str | None = None,
                     mode: SearchMode = "hybrid", filter: FilterArg = None,
                     valid: Time | None = None, known: Time | None = None,
                     after: After | None = None) -> SearchAnswer:
        return await self._run(self.calls.search(text, k, kinds, session, subject, mode, valid,
                                                 known, after, filter=filter))

    async def records(self, session: str | None = None, *, start: Time | None = None,
                      end: Time | None = None, limit: int | None = None,
                      filter: FilterArg = None, valid: Time | None = None,
                      known: Time | None = None, after: After | None = None) -> RecordsAnswer:
        return await self._run(self.calls.records(session, start, end, limit, valid, known,
                                                  after, filter=filter))

    async def context(self, text: str, budget_tokens: int = 2000, *,
                      session: str | None = None, subject: str | None = None,
                      filter: FilterArg = None, valid: Time | None = None,
                      known: Time | None = None, after: After | None = None) -> Context:
        return await self._run(self.calls.context(text, budget_tokens, session, subject, valid,
                                                  known, after, filter=filter))

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
