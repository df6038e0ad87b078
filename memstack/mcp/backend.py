"""What the MCP tools need from memory, and how a call finds the tenant's memory.

:class:`MemoryBackend` is the async surface the tools call; :class:`AsyncMemoryService` (the
HTTP client) provides it, against a URL (stdio) or in-process against the service's own app
(the ``/mcp`` mount). A :data:`BackendResolver` picks the backend of one call from its HTTP
headers (``None`` over stdio): the tenant comes from configuration or the API key, never from
a tool argument.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Protocol

from memstack.schemas.events import ForgetScope
from memstack.service.calls import FilterArg
from memstack.service.types import ForgetReceipt, ForgetStatus, WriteReceipt
from memstack.view.types import (
    Context,
    FactsAnswer,
    HistoryAnswer,
    RecordsAnswer,
    SearchAnswer,
    SearchMode,
)

Time = datetime | date | str


class MemoryBackend(Protocol):
    """The async calls behind the MCP tools (one tenant's memory)."""

    @property
    def tenant(self) -> str: ...

    def message(self, session: str, role: str, text: str,
                **env: Any) -> Awaitable[WriteReceipt]: ...

    def observation(self, session: str, text: str, **env: Any) -> Awaitable[WriteReceipt]: ...

    def note(self, session: str, text: str, **env: Any) -> Awaitable[WriteReceipt]: ...

    def fact(self, session: str, subject: str, relation: str, object: str,
             valid_from: datetime | None = None, valid_to: datetime | None = None,
             **env: Any) -> Awaitable[WriteReceipt]: ...

    def retract(self, session: str, subject: str, relation: str, object: str | None = None,
                valid_from: datetime | None = None, **env: Any) -> Awaitable[WriteReceipt]: ...

    def facts(self, subject: str | None = None, relation: str | None = None, *,
              valid: Time | None = None, known: Time | None = None,
              after: str | None = None) -> Awaitable[FactsAnswer]: ...

    def history(self, subject: str, relation: str | None = None, *, valid: Time | None = None,
                known: Time | None = None, after: str | None = None) -> Awaitable[HistoryAnswer]:
        ...

    def search(self, text: str, k: int = 10, *, kinds: Sequence[str] = (),
               session: str | None = None, subject: str | None = None,
               mode: SearchMode = "hybrid", filter: FilterArg = None,
               valid: Time | None = None, known: Time | None = None,
               after: str | None = None) -> Awaitable[SearchAnswer]:
        ...

    def records(self, session: str | None = None, *, start: Time | None = None,
                end: Time | None = None, limit: int | None = None, filter: FilterArg = None,
                valid: Time | None = None, known: Time | None = None,
                after: str | None = None) -> Awaitable[RecordsAnswer]:
        ...

    def context(self, text: str, budget_tokens: int = 2000, *, session: str | None = None,
                subject: str | None = None, filter: FilterArg = None,
                valid: Time | None = None, known: Time | None = None,
                after: str | None = None) -> Awaitable[Context]: ...

    def forget(self, scope: ForgetScope | dict[str, Any],
               reason: str | None = None) -> Awaitable[ForgetReceipt]: ...

    def forget_status(self, request_id: str) -> Awaitable[ForgetStatus]: ...


BackendResolver = Callable[[Mapping[str, str] | None], MemoryBackend]
"""The backend of one tool call, from the call's HTTP headers (``None`` over stdio)."""


def fixed(backend: MemoryBackend) -> BackendResolver:
    """One backend for every call (stdio: the tenant is configuration)."""
    return lambda _headers: backend


def api_key_of(headers: Mapping[str, str] | None) -> str | None:
    """The key of ``Authorization: Bearer KEY`` or ``X-API-Key: KEY`` (header names any case)."""
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    auth = lower.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return lower.get("x-api-key") or None
