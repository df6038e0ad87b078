"""Errors of the replay path; each says what to do next."""

from __future__ import annotations

from memstack.foundation.errors import MemstackError


class ReplayError(MemstackError):
    """Root of the replay errors."""


class BadPointError(ReplayError):
    """A ``--from``/``--to`` value is neither ``earliest``, ``end``, a time nor offsets."""


class ReplayJobError(ReplayError):
    """The Flink job failed; the message carries Flink's reason and where its logs are."""


class StoresSwitchError(ReplayError):
    """The stores pointer could not be switched (the target is not a set of stores)."""


class FlinkClusterUnavailableError(ReplayError):
    """``--flink HOST:PORT`` names no cluster that can run the job (down, or too few slots)."""
