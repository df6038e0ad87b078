"""Positions in the log, and transaction time derived from them.

Transaction time comes from the log, never from an operator's clock: the broker's append time
(``LogAppendTime``) with the partition and offset as tie-break. A replay therefore computes the
same rows as the live pipeline. The types themselves are defined once, with every other log
coordinate, in :mod:`memstack.foundation.log_coordinates`; they are re-exported here for the
operators and their callers.
"""

from __future__ import annotations

from memstack.foundation.log_coordinates import LoggedEvent as LoggedEvent
from memstack.foundation.log_coordinates import LogPosition as LogPosition

__all__ = ["LogPosition", "LoggedEvent"]
