"""The root of memstack's error tree.

Every error a user can hit derives from :class:`MemstackError` and says what to do next.
Packages add their own subclasses in their own ``errors.py``.
"""

from __future__ import annotations


class MemstackError(Exception):
    """Root of every error raised by memstack."""


class ConfigError(MemstackError):
    """A setting is missing or invalid; the message names the MEMSTACK_* variable to fix."""


class BrokerUnavailableError(MemstackError):
    """The Kafka broker cannot be reached. Start it with `memstack infra up`."""
