"""Forgetting in the LanceDB memories table: rows, indexes and every old version.

A Lance ``delete`` only writes a deletion file: the row stays in its data file, in every older
version (``checkout`` brings it back) and in the index files. :meth:`LanceForgetStore.hide`
deletes (the logical phase: no read returns the row from the next query on);
:meth:`LanceForgetStore.purge` rewrites only the data files holding deleted rows, with the
indexes remapped to the rewritten rows, then deletes tags and every older version and
unreferenced file (:meth:`LanceVectorIndex.purge_deleted`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
from lancedb.index import FTS

from memstack.operators.forget import Tombstones
from memstack.pipelines.forgetting.contract import (
    AuditProbe,
    ForgetReport,
    Residual,
    files_containing,
)
from memstack.pipelines.stores.lance_index import (
    TABLE,
    TEXT_INDEX,
    IndexPolicy,
    LanceVectorIndex,
    quote,
)
from memstack.schemas.rows import EMBEDDING_DIM

log = logging.getLogger(__name__)

NAME = "lancedb"
MAX_SEARCHED_TEXTS = 64
"""Search checks per audit (each text costs a full-text and a vector query); the id, value and
file-byte checks cover every text."""


def table_of(index: LanceVectorIndex) -> Any:
    """The index's LanceDB table (the index exposes none yet; see docs/forget.md wiring)."""
    return index._table  # no public handle yet


def id_filter(ids: list[str]) -> str:
    return f"event_id IN ({', '.join(quote(i) for i in ids)})" if ids else "false"


class LanceForgetStore:
    """:class:`~memstack.pipelines.forgetting.contract.Forgettable` over one LanceDB dir.

    Opens its own index from ``directory``, or works on ``index`` (the live worker's).
    """

    def __init__(self, directory: Path, *, dim: int = EMBEDDING_DIM,
                 policy: IndexPolicy | None = None,
                 index: LanceVectorIndex | None = None) -> None:
        self.directory = Path(directory)
        self._owned = index is None
        self.index = index if index is not None else LanceVectorIndex(
            self.directory, dim=dim, policy=policy)

    @property
    def name(self) -> str:
        return NAME

    def forget(self, targets: Tombstones) -> ForgetReport:
        began = time.monotonic()
        report = self.hide(targets)
        physical = self.purge()
        physical["s"] = time.monotonic() - began
        return ForgetReport(NAME, report.deleted, physical)

    def hide(self, targets: Tombstones) -> ForgetReport:
        """The logical phase: the rows deleted (a deletion file, committed at once)."""
        began = time.monotonic()
        deleted = self.erase(targets)
        return ForgetReport(NAME, {"memories": deleted}, {"hide_s": time.monotonic() - began})

    def erase(self, targets: Tombstones) -> int:
        return self.index.delete_events(sorted(targets.event_ids))

    def purge(self) -> dict[str, float]:
        """The physical phase: rewrite the files holding deleted rows, drop every old version.

        The full-text index is remapped, not rebuilt: its BM25 statistics (document count,
        term frequencies) still count the forgotten rows, so rankings differ slightly from a
        clean build. With its own index (the stores not in use) it is rebuilt too.
        """
        out = self.index.purge_deleted().figures()
        if self._owned and self.index.count():
            began = time.monotonic()
            table_of(self.index).create_index("text", config=FTS(), name=TEXT_INDEX,
                                              replace=True)
            self.index.purge_deleted()  # drops the version holding the old index files
            out["text_index_rebuilt_s"] = time.monotonic() - began
        return out

    def residuals(self, probe: AuditProbe) -> list[Residual]:
        out: list[Residual] = []
        table = table_of(self.index)
        ids = sorted(probe.event_ids)
        rows = sum(int(table.count_rows(id_filter(c))) for c in _chunks(ids, 500))
        if rows:
            out.append(Residual(NAME, "rows", rows, "memories"))
        out += self._old_versions(ids)
        out += self._search_residuals(probe)
        files = [str(p) for p in self.directory.rglob("*") if p.is_file()]
        hits = files_containing(files, probe.byte_probes)
        out += [Residual(NAME, "file_bytes", n, path) for path, n in hits.items()]
        return out

    def _old_versions(self, ids: list[str]) -> list[Residual]:
        """Open each older version (and tag) read-only; any forgotten row there is readable."""
        table = table_of(self.index)
        versions = [int(v["version"]) for v in table.list_versions()]
        tags = list(table.tags.list())
        older = [v for v in versions if v != table.version]
        if not older and not tags:
            return []
        reader = lancedb.connect(self.directory).open_table(TABLE)
        readable = 0
        for version in older:
            reader.checkout(version)
            readable += sum(int(reader.count_rows(id_filter(c))) for c in _chunks(ids, 500))
        detail = f"{len(older)} older version(s), {len(tags)} tag(s)"
        return [Residual(NAME, "old_versions", readable + len(tags), detail)] \
            if readable or tags else []

    def _search_residuals(self, probe: AuditProbe) -> list[Residual]:
        """Full-text and near-duplicate vector search for the forgotten texts, at every time."""
        tenant, out = probe.request.tenant, []
        text_hits = 0
        for text in probe.texts[:MAX_SEARCHED_TEXTS]:
            for hit in self.index.search_text(_fts(text), tenant=tenant, k=5):
                text_hits += hit.row.event_id in probe.event_ids or hit.row.text == text
        if text_hits:
            out.append(Residual(NAME, "exact_text", text_hits, "full-text search"))
        if probe.vectors is not None and len(probe.vectors):
            near = 0
            n = min(len(probe.vectors), MAX_SEARCHED_TEXTS)
            pairs = list(zip(probe.vectors[:n], probe.texts[:n], strict=True))
            for vector, text in pairs:
                for hit in self.index.search_vector(np.asarray(vector), tenant=tenant, k=5):
                    similar = 1.0 - hit.score >= probe.near_duplicate_similarity
                    near += similar and (hit.row.event_id in probe.event_ids
                                         or hit.row.text == text)
            if near:
                out.append(Residual(NAME, "near_duplicate", near, "vector search"))
        return out

    def close(self) -> None:
        self.index.close()


def _fts(text: str) -> str:
    words = "".join(c if c.isalnum() else " " for c in text).split()
    return " ".join(words[:32]) or "_"


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i:i + size] for i in range(0, len(items), size)] or [[]]
