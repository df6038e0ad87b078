"""memstack: memory for AI agents as an event-sourced streaming pipeline.

The public surface is imported lazily so ``import memstack`` stays cheap:
``MemoryClient`` (sync producer SDK), ``AsyncMemoryClient``, ``MemoryService`` and
``AsyncMemoryService`` (HTTP client of a running service), ``MemoryView`` (as-of queries over
local stores; needs the ``server`` extra), ``Event`` and ``Settings``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "MemoryClient": "memstack.client",
    "AsyncMemoryClient": "memstack.aio",
    "MemoryService": "memstack.service.client",
    "AsyncMemoryService": "memstack.service.client",
    "ServiceError": "memstack.service.types",
    "WriteReceipt": "memstack.service.types",
    "MemoryView": "memstack.view",
    "Event": "memstack.schemas.events",
    "EventKind": "memstack.schemas.events",
    "Settings": "memstack.foundation.settings",
    "MemstackError": "memstack.foundation.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memstack' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
