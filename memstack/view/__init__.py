"""The read side: as-of-time views over the indexes (Python API; CLI and HTTP build on it).

``MemoryView(tenant, stores).as_of(valid=..., known=...)`` answers ``facts``, ``history``,
``search``, ``records`` and ``context`` for one tenant. See docs/queries.md.
"""

from memstack.view.context import (
    ContextRequest,
    ContextSource,
    CurrentFacts,
    RecentTurns,
    RelevantRecords,
    default_sources,
    estimate_tokens,
)
from memstack.view.errors import InvalidAsOfError, InvalidQueryError, TenantScopeError, ViewError
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
