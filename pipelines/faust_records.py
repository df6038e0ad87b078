"""Faust's side of the live worker's records: its messages as the projector's
:class:`~memstack.pipelines.log_reader.LogRecord`, and the name its agents are declared under
(the events agent and the forget agent, :mod:`memstack.pipelines.forget_agent`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memstack.operators.log import LogPosition
from memstack.pipelines.log_reader import LogRecord

AGENT_NAME = "memstack-live-project"


def record_of(message: Any) -> LogRecord:
    """A Faust ``Message`` (raw key/value bytes) as the projector's :class:`LogRecord`."""
    millis = round(float(message.timestamp) * 1000)  # Faust hands seconds; the log has millis
    log_time = datetime.fromtimestamp(millis / 1000, UTC)
    position = LogPosition(log_time, int(message.partition), int(message.offset))
    return LogRecord(str(message.topic), message.key, message.value, position,
                     int(message.timestamp_type))
