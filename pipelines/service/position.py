"""Positions: how far the stores have applied the log, as an opaque token for clients.

The type is one of the log coordinates, defined once in
:mod:`memstack.foundation.log_coordinates` (:class:`Position`, a cut of the events topic and
one of the forget topic, and its token ``e0-12.e2-5.f1-3``); this module re-exports it for the
service's callers.
"""

from __future__ import annotations

from memstack.foundation.log_coordinates import InvalidPositionError as InvalidPositionError
from memstack.foundation.log_coordinates import Position as Position

__all__ = ["InvalidPositionError", "Position"]
