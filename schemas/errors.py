"""Errors of the event schema."""

from __future__ import annotations

from memstack.foundation.errors import MemstackError


class InvalidEventError(MemstackError, ValueError):
    """An event does not satisfy the schema.

    ``field`` is the dotted path of the offending field and ``rule`` the rule it broke, so a
    producer can fix its input; nothing was sent.
    """

    def __init__(self, field: str, rule: str, *, raw: bytes | None = None) -> None:
        self.field = field
        self.rule = rule
        self.raw = raw
        super().__init__(f"invalid event: field '{field}': {rule}")
