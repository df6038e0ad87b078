"""memstack: memory for AI agents as an event-sourced streaming pipeline.

The public surface is imported lazily so ``import memstack`` stays cheap:
``MemoryClient`` (sync producer SDK), ``AsyncMemoryClient``, ``MemoryView`` (as-of queries),
``Event`` and ``Settings``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "MemoryClient": "memstack.client",
    "AsyncMemoryClient": "memstack.aio",
    "MemoryView": "memstack.view",
    "Event": "memstack.schemas.events",
    "EventKind": "memstack.schemas.events",
    "Settings": "memstack.settings",
    "MemstackError": "memstack.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memstack' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
