"""``$MEMSTACK_HOME/service.json``: how a running ``memstack serve`` is found (url, pid, and the
stores it serves) by ``memstack query`` and ``memstack reindex``; the light client reads the
same file (:mod:`memstack.service.config`, where its name is defined)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from memstack.foundation.settings import Settings
from memstack.service.config import SERVICE_FILE


def service_file(settings: Settings) -> Path:
    return settings.home / SERVICE_FILE


def find_service(settings: Settings) -> dict[str, Any] | None:
    """The running service's ``{"url", "pid"}`` from ``service.json`` (None: none running)."""
    path = service_file(settings)
    try:
        found: dict[str, Any] = json.loads(path.read_text())
        os.kill(int(found["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found
