"""``Stores``: the event index and the vector index of one stores directory, opened together.

Layout: ``<dir>/memstack.duckdb`` (DuckDB) and ``<dir>/lance/`` (LanceDB). The live stores are
``<MEMSTACK_HOME>/stores/live``; rebuilds write into their own directory.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import TracebackType
from typing import Self

from memstack.foundation.settings import Settings
from memstack.pipelines.stores import arrow
from memstack.pipelines.stores.base import EventIndex, VectorIndex
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.lance_index import IndexPolicy, LanceVectorIndex
from memstack.pipelines.stores.layout import DUCKDB_FILE, LANCE_DIR
from memstack.schemas.rows import EMBEDDING_DIM

log = logging.getLogger(__name__)

def stores_dir(settings: Settings, name: str | None = None) -> Path:
    """The directory of the stores called ``name`` under the settings' home; without a name,
    the stores served: where ``stores/current`` points (``memstack stores switch``, ``memstack
    reindex``), else ``stores/live``."""
    if name is None:
        from memstack.pipelines.replay.switch import current_stores

        return current_stores(settings)
    return settings.stores_dir / name


class Stores:
    """Both indexes of one directory. Use as a context manager, or call :meth:`close`."""

    def __init__(self, directory: Path, events: EventIndex, vectors: VectorIndex) -> None:
        self.directory = directory
        self.events = events
        self.vectors = vectors

    @classmethod
    def open(cls, directory: Path, *, read_only: bool = False, dim: int = EMBEDDING_DIM,
             policy: IndexPolicy | None = None) -> Stores:
        """Open (creating unless ``read_only``) the stores in ``directory``."""
        directory = Path(directory)
        events = DuckDBEventIndex(directory / DUCKDB_FILE, read_only=read_only)
        try:
            vectors = LanceVectorIndex(directory / LANCE_DIR, dim=dim, read_only=read_only,
                                       policy=policy)
        except BaseException:
            events.close()
            raise
        return cls(directory, events, vectors)

    @property
    def read_only(self) -> bool:
        return self.events.read_only

    def content_hashes(self) -> dict[str, str]:
        """Per table hashes: ``records``, ``fact_entries``, ``fact_versions``, ``offsets``,
        ``memories``."""
        return {**self.events.content_hashes(), **self.vectors.content_hashes()}

    def content_hash(self) -> str:
        return arrow.combine(self.content_hashes())

    def close(self) -> None:
        self.vectors.close()
        self.events.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
