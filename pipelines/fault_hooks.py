"""Fault-injection hooks the live worker honours, off unless their variable is set.

``MEMSTACK_FAULT_BATCH_DELAY_FILE=PATH``: before each batch the worker reads PATH and, when it
holds a number of seconds, waits that long (at most 60) before applying the batch: a slow
consumer whose lag builds up and recovers once the file is emptied or removed, without a
restart. Used by ``memstack eval faults``; never set in production.
"""

from __future__ import annotations

import os
from pathlib import Path

BATCH_DELAY_VARIABLE = "MEMSTACK_FAULT_BATCH_DELAY_FILE"
MAX_DELAY_S = 60.0


def injected_batch_delay() -> float:
    """Seconds to wait before the next batch (0 when the hook is off or the file is empty)."""
    path = os.environ.get(BATCH_DELAY_VARIABLE)
    if not path:
        return 0.0
    try:
        return max(0.0, min(float(Path(path).read_text().strip() or 0), MAX_DELAY_S))
    except (OSError, ValueError):
        return 0.0
