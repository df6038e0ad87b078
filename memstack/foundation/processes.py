"""Whether a process of this host still runs (leases and shard cards name their pid)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs on this host (also when it is another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
