"""Errors of the query layer (as-of views, search, context assembly, the HTTP service)."""

from __future__ import annotations

from memstack.foundation.errors import MemstackError


class ViewError(MemstackError):
    """A query could not be answered; the message says which argument to change."""


class InvalidAsOfError(ViewError, ValueError):
    """An as-of time or log position is malformed.

    Give times as RFC 3339 with a zone (``2024-05-01T12:00:00Z``) or ``now``; give a log position
    as ``partition:next_offset`` pairs (``0:120,1:98,2:143``).
    """


class InvalidQueryError(ViewError, ValueError):
    """A query argument is out of range (``k`` < 1, an empty search text, a negative budget)."""


class InvalidFilterError(InvalidQueryError):
    """A metadata filter cannot be read; ``field`` and ``op`` name where (docs/queries.md,
    "Filters", gives the syntax)."""

    def __init__(self, message: str, field: str, op: str) -> None:
        super().__init__(message)
        self.field, self.op = field, op


class TenantScopeError(ViewError):
    """A store returned a row of another tenant; the row was dropped and this is a store bug."""


class AuthError(ViewError):
    """API keys are missing or malformed. Set ``MEMSTACK_API_KEYS="key:tenant,..."`` or
    ``MEMSTACK_API_KEYS_FILE`` (one ``key:tenant`` per line)."""
