"""One error shape for the HTTP service: RFC 9457 problem details.

Every error the service answers is ``application/problem+json``::

    {"type": "urn:memstack:problem:invalid-parameter", "title": "Invalid parameter",
     "status": 422, "detail": "known: offset 10**30 is out of range ...", "field": "known",
     "errors": [{"field": "known", "rule": "..."}]}

- ``type`` names the kind of failure (a URN, ``urn:memstack:problem:<slug>``; it need not
  resolve), ``title`` is its fixed summary, ``status`` the HTTP status, ``detail`` what happened
  to this request and what to change.
- ``field`` names the offending parameter or body field when there is one (``k``,
  ``events[1].occurred_at``), and ``errors`` lists every one when there are several (FastAPI's
  own validation errors).
- Extension members carry what a client can act on: ``behind``/``applied`` on a 504,
  ``written``/``not_written`` on a write that failed while producing.

:class:`ProblemError` is raised by the routes; :func:`install_problem_handlers` maps it, the
framework's own errors (404 route, 405 method, 422 validation) and memstack's error classes
onto the shape, and turns any unexpected exception into a 500 problem that leaks nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from memstack.foundation.errors import MemstackError
from memstack.service.types import PROBLEM_TITLES

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:memstack:problem:"

TITLES: Mapping[int, tuple[str, str]] = PROBLEM_TITLES
"""The default type slug and title per status."""


class FieldProblem(BaseModel):
    """One offending parameter or body field and the rule it broke."""

    field: str = Field(description="the parameter (``k``) or dotted body path "
                                   "(``events[1].occurred_at``)")
    rule: str = Field(description="what the value must be")


class Problem(BaseModel):
    """An RFC 9457 problem document (``application/problem+json``)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="urn:memstack:problem:<slug>, the kind of failure")
    title: str = Field(description="a short, fixed summary of the type")
    status: int = Field(description="the HTTP status")
    detail: str = Field(description="what happened to this request and what to change")
    instance: str | None = Field(None, description="the request's path")
    field: str | None = Field(None, description="the offending parameter, when there is one")
    errors: list[FieldProblem] | None = Field(None, description="every offending field")


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route decorator: the listed error statuses, each a problem."""
    return {status: {"model": Problem, "description": TITLES.get(status, ("", "Error"))[1],
                     "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
            for status in statuses}


class ProblemError(MemstackError):
    """An error answered as a problem document; raise it from a route or dependency."""

    def __init__(self, status: int, detail: str, *, field: str | None = None,
                 slug: str | None = None, title: str | None = None,
                 errors: Sequence[FieldProblem] | None = None,
                 headers: Mapping[str, str] | None = None, **extensions: Any) -> None:
        super().__init__(detail)
        default_slug, default_title = TITLES.get(status, ("error", "Error"))
        self.status = status
        self.detail = detail
        self.field = field
        self.slug = slug or default_slug
        self.title = title or default_title
        self.errors = list(errors) if errors is not None else None
        self.headers = dict(headers or {})
        self.extensions = extensions

    def problem(self, instance: str | None = None) -> Problem:
        errors = self.errors
        if errors is None and self.field is not None:
            errors = [FieldProblem(field=self.field, rule=self.detail)]
        return Problem(type=TYPE_PREFIX + self.slug, title=self.title, status=self.status,
                       detail=self.detail, instance=instance, field=self.field, errors=errors,
                       **self.extensions)

    def response(self, instance: str | None = None) -> JSONResponse:
        body = self.problem(instance).model_dump(mode="json", exclude_none=True)
        return JSONResponse(body, status_code=self.status, headers=self.headers or None,
                            media_type=MEDIA_TYPE)


def invalid(field: str, rule: str, status: int = 422) -> ProblemError:
    """A parameter or body field that breaks ``rule`` (the detail names both)."""
    return ProblemError(status, f"{field}: {rule}", field=field, slug="invalid-parameter",
                        title="Invalid parameter")


def from_http_exception(exc: StarletteHTTPException) -> ProblemError:
    """FastAPI's and Starlette's ``HTTPException`` (404 route, 405 method, the routes' own)."""
    detail: Any = exc.detail
    extensions: dict[str, Any] = {}
    if isinstance(detail, Mapping):
        extensions = {k: v for k, v in detail.items() if k not in ("message", "detail")}
        detail = detail.get("message", detail.get("detail", ""))
    if exc.status_code == 405:
        detail = f"{detail}: this path does not take this method"
    elif exc.status_code == 404 and detail == "Not Found":
        detail = "Not Found: no such route; see /docs for the API"
    field = extensions.pop("field", None)
    return ProblemError(exc.status_code, str(detail), field=field, headers=exc.headers,
                        **extensions)


def from_validation(exc: RequestValidationError) -> ProblemError:
    """FastAPI's request validation (422): every offending field, the first one as ``field``."""
    errors = [FieldProblem(field=_loc(err.get("loc", ())),
                           rule=str(err.get("msg", "invalid")).removeprefix("Value error, "))
              for err in exc.errors()]
    if not errors:
        return ProblemError(422, "the request is invalid", slug="invalid-parameter")
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ProblemError(422, f"{first.field}: {first.rule}{more}", field=first.field,
                        errors=errors, slug="invalid-parameter", title="Invalid parameter")


def _loc(loc: Sequence[Any]) -> str:
    """``("query", "k")`` -> ``k``; ``("body", "scope", "type")`` -> ``scope.type``."""
    parts = list(loc[1:] if loc and loc[0] in ("query", "path", "header", "body", "cookie")
                 else loc)
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def internal(exc: BaseException) -> ProblemError:
    """An unexpected exception: logged with its traceback, answered without internals."""
    log.error("unexpected error answering a request: %s", type(exc).__name__, exc_info=exc)
    return ProblemError(500, "the service failed to answer this request; it was logged. Retry, "
                             "and report it if it keeps failing")


def memstack_problems() -> dict[type[Exception], Callable[[Any], ProblemError]]:
    """memstack's error classes, each onto its problem (most specific class first)."""
    from memstack.foundation.log_coordinates import InvalidPositionError
    from memstack.pipelines.service.changes import FeedGoneError
    from memstack.pipelines.service.watch import ServiceDrainingError, StoresBehindError
    from memstack.pipelines.service.writes import WriteRejectedError
    from memstack.pipelines.stores.errors import StoreError
    from memstack.view.errors import TenantScopeError, ViewError

    def store(exc: StoreError) -> ProblemError:
        log.error("store error: %s", exc)  # may hold SQL or paths: logged, not answered
        return ProblemError(503, "the stores could not answer this query now; retry shortly",
                            headers={"Retry-After": "1"})

    def scope(exc: TenantScopeError) -> ProblemError:
        log.error("tenant scope violation: %s", exc)
        return ProblemError(500, "the service failed to answer this request; it was logged")

    return {
        WriteRejectedError: lambda exc: ProblemError(
            exc.status, exc.detail, field=exc.field, **exc.extensions,
            headers={"Retry-After": "1"} if exc.status == 503 else None),
        TenantScopeError: scope,
        ViewError: lambda exc: ProblemError(422, str(exc), slug="invalid-parameter",
                                            title="Invalid parameter"),
        StoreError: store,
        InvalidPositionError: lambda exc: invalid("after", str(exc)),
        StoresBehindError: lambda exc: ProblemError(504, str(exc), behind=exc.behind,
                                                    applied=exc.applied.token),
        FeedGoneError: lambda exc: ProblemError(410, str(exc), field="from"),
        ServiceDrainingError: lambda exc: ProblemError(503, str(exc), slug="draining",
                                                       title="Service stopping",
                                                       headers={"Retry-After": "5"}),
    }


def install_problem_handlers(
        app: FastAPI,
        extra: Mapping[type[Exception], Callable[[Any], ProblemError]] | None = None,
) -> None:
    """Every error of ``app`` answered as a problem document: :class:`ProblemError`, the
    framework's ``HTTPException`` and validation errors, memstack's error classes
    (:func:`memstack_problems`, plus ``extra``) and, last, any other exception as a 500."""

    def handler(convert: Any) -> Any:
        async def handle(request: Request, exc: Exception) -> JSONResponse:
            try:
                problem: ProblemError = convert(exc)
            except Exception as failed:  # a converter must never turn an error into a 500 page
                problem = internal(failed)
            return problem.response(request.url.path)

        return handle

    app.add_exception_handler(ProblemError, handler(lambda exc: exc))
    app.add_exception_handler(StarletteHTTPException, handler(from_http_exception))
    app.add_exception_handler(RequestValidationError, handler(from_validation))
    for cls, convert in {**memstack_problems(), **(extra or {})}.items():
        app.add_exception_handler(cls, handler(convert))
    app.add_exception_handler(Exception, handler(internal))
