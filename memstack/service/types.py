"""What the memstack service answers, and its errors, as the light HTTP client sees them.

Write and forget receipts are pydantic models of the service's JSON; read answers are the
query layer's own value types (:mod:`memstack.view.types`), parsed from the same JSON the
service renders from them. The error tree maps HTTP status codes to what a caller can do:
every :class:`ServiceError` carries the status and the service's ``detail``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from memstack.foundation.errors import MemstackError
from memstack.foundation.log_coordinates import Written


class ServiceError(MemstackError):
    """The service refused or failed a request; ``status`` and ``detail`` say why."""

    def __init__(self, message: str, *, status: int | None = None, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class ServiceUnavailableError(ServiceError):
    """No answer from the service (not running, wrong URL) or a 503: start ``memstack serve``
    or check the URL, then retry."""


class AuthenticationError(ServiceError):
    """401: no API key, or one the service does not know. Pass ``api_key`` or set
    ``MEMSTACK_API_KEY``."""


class PermissionDeniedError(ServiceError):
    """403: the key is not granted this tenant, or lacks the role (write, read, forget)."""


class NotFoundError(ServiceError):
    """404: no such route or forget request id."""


class PositionGoneError(ServiceError):
    """410: the change feed no longer holds that position; resume from a later one or now."""


class PayloadTooLargeError(ServiceError):
    """413: the batch is over the service's limit; send fewer or smaller events per call."""


class InvalidRequestError(ServiceError):
    """400/422: a malformed event or argument; ``detail`` names the field and the rule."""


class NotCaughtUpError(ServiceError):
    """504: the stores did not reach the ``after=`` position in time; retry the read later."""


class ServerError(ServiceError):
    """Any other 5xx: a fault in the service; its log says more."""


class ConflictError(ServiceError):
    """409: an event id was already written with other content; use a new id."""


PROBLEM_TITLES: dict[int, tuple[str, str]] = {
    400: ("bad-request", "Bad request"),
    401: ("unauthorized", "Unauthorized"),
    403: ("forbidden", "Forbidden"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    409: ("conflict", "Conflict"),
    410: ("gone", "Gone"),
    413: ("too-large", "Content too large"),
    415: ("unsupported-media-type", "Unsupported media type"),
    422: ("invalid-request", "Invalid request"),
    500: ("internal", "Internal error"),
    503: ("unavailable", "Service unavailable"),
    504: ("stores-behind", "Stores behind"),
}
"""The service's problem documents: the default type slug and title per status (the server's
:mod:`memstack.server.problems` answers them; MCP tool errors quote the title)."""


def problem_text(status: int | None, detail: Any) -> str:
    """One line for a person or an agent: ``unauthorized: <detail> (HTTP 401)``."""
    title = PROBLEM_TITLES.get(status or 0, ("", "error"))[1].lower()
    return f"{title}: {describe(detail)}" + (f" (HTTP {status})" if status else "")


_BY_STATUS: dict[int, type[ServiceError]] = {
    400: InvalidRequestError, 401: AuthenticationError, 403: PermissionDeniedError,
    404: NotFoundError, 409: ConflictError, 410: PositionGoneError, 413: PayloadTooLargeError,
    415: InvalidRequestError, 422: InvalidRequestError, 503: ServiceUnavailableError,
    504: NotCaughtUpError,
}


def error_for(status: int, detail: Any, where: str) -> ServiceError:
    """The typed error of an HTTP error answer (``detail`` is the service's explanation)."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ServiceError)
    return cls(f"{where} answered {status}: {describe(detail)}", status=status, detail=detail)


def describe(detail: Any) -> str:
    """FastAPI's detail as one line: validation errors as ``field: message`` pairs."""
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                parts.append(f"{loc}: {item.get('msg', item)}" if loc else str(item.get("msg")))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    if isinstance(detail, dict) and "message" in detail:  # e.g. a 504: how far behind
        rest = {k: v for k, v in detail.items() if k != "message"}
        return f"{detail['message']} {rest}" if rest else str(detail["message"])
    return str(detail)


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")


EventWritten = Written
"""Where the log put one event (the same receipt the Kafka clients return; ``log_time`` is its
transaction time); the public name of :class:`memstack.foundation.log_coordinates.Written`
in the HTTP client's answers."""


class WriteReceipt(_Answer):
    """The answer to a write: each event's place in the log, and a position token.

    Pass the receipt (or its ``position``) as ``after=`` to a read to see the write in it.
    """

    written: tuple[Written, ...]
    position: str

    @property
    def event_ids(self) -> list[str]:
        return [w.event_id for w in self.written]


class ForgetReceipt(_Answer):
    """A forget request the service accepted: its id (for the audit) and its position."""

    request_id: str
    position: str
    warnings: list[str] = []
    """What the forget cannot erase (``log not erased: sealing is off ...``); empty when the
    deployment seals payloads."""


class ForgetStatus(_Answer):
    """Where a forget request stands; the per-store audit is kept as the service sent it."""

    request_id: str
    status: str
    """``logged``, ``invisible`` (no read returns the content), ``erased`` (its bytes are gone
    from every store) or ``audited``."""
    scope: str | None = None
    phases: dict[str, str] | None = None
    """When each phase was reached (ISO 8601, UTC)."""
    phase_seconds: dict[str, float] | None = None
    """Per phase reached, seconds after the request was logged."""
    audit: dict[str, Any] | None = None


class Change(_Answer):
    """One server-sent event of the change feed: ``id`` is the position token after it."""

    id: str | None = None
    event: str | None = None
    data: Any = None
