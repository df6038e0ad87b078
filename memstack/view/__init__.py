"""The read side: as-of-time views over the indexes (Python API; CLI and HTTP build on it).

``MemoryView(tenant, stores).as_of(valid=..., known=...)`` answers ``facts``, ``history``,
``search``, ``records`` and ``context`` for one tenant. See docs/queries.md.

Names are imported lazily: the value types (:mod:`memstack.view.types`) load without the
stores, so the light HTTP client can parse answers without duckdb, lancedb or torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstack.view.context import (
        ContextRequest,
        ContextSource,
        CurrentFacts,
        RecentTurns,
        RelevantRecords,
        default_sources,
        estimate_tokens,
    )
    from memstack.view.errors import (
        InvalidAsOfError,
        InvalidQueryError,
        TenantScopeError,
        ViewError,
    )
    from memstack.view.memory_view import AsOfView, MemoryView
    from memstack.view.types import (
        AsOf,
        AsOfInfo,
        Context,
        ContextItem,
        Fact,
        LogCut,
        Memory,
        Record,
        ScoreParts,
        SearchHit,
        SearchMode,
    )

_MODULES = {
    "AsOf": "memstack.view.types",
    "AsOfInfo": "memstack.view.types",
    "AsOfView": "memstack.view.memory_view",
    "Context": "memstack.view.types",
    "ContextItem": "memstack.view.types",
    "ContextRequest": "memstack.view.context",
    "ContextSource": "memstack.view.context",
    "CurrentFacts": "memstack.view.context",
    "Fact": "memstack.view.types",
    "InvalidAsOfError": "memstack.view.errors",
    "InvalidQueryError": "memstack.view.errors",
    "LogCut": "memstack.view.types",
    "Memory": "memstack.view.types",
    "MemoryView": "memstack.view.memory_view",
    "RecentTurns": "memstack.view.context",
    "Record": "memstack.view.types",
    "RelevantRecords": "memstack.view.context",
    "ScoreParts": "memstack.view.types",
    "SearchHit": "memstack.view.types",
    "SearchMode": "memstack.view.types",
    "TenantScopeError": "memstack.view.errors",
    "ViewError": "memstack.view.errors",
    "default_sources": "memstack.view.context",
    "estimate_tokens": "memstack.view.context",
}

__all__ = [
    "AsOf",
    "AsOfInfo",
    "AsOfView",
    "Context",
    "ContextItem",
    "ContextRequest",
    "ContextSource",
    "CurrentFacts",
    "Fact",
    "InvalidAsOfError",
    "InvalidQueryError",
    "LogCut",
    "Memory",
    "MemoryView",
    "RecentTurns",
    "Record",
    "RelevantRecords",
    "ScoreParts",
    "SearchHit",
    "SearchMode",
    "TenantScopeError",
    "ViewError",
    "default_sources",
    "estimate_tokens",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'memstack.view' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
