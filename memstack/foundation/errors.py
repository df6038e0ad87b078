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


class KafkaSecurityError(BrokerUnavailableError):
    """The broker answered but refused the connection (TLS, SASL): the message names the
    ``MEMSTACK_KAFKA_*`` setting to fix and what the broker or the TLS layer said."""


class KafkaAuthorizationError(MemstackError):
    """The broker authenticated the principal but an ACL does not allow the operation;
    ``memstack topics acls`` prints the ACLs each memstack role needs."""
