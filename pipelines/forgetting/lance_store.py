"""Forgetting in the LanceDB memories table: rows, indexes and every old version.

A Lance ``delete`` only writes a deletion file: the row stays in its data file, in every older
version (``checkout`` brings it back) and in the index files. ``optimize`` materialises
deletions only above a threshold this API does not expose, so the purge rewrites the table
(``add(mode="overwrite")`` of the surviving rows), rebuilds every index from the new files,
deletes tags (a tagged version would keep the content) and removes every older version and
unreferenced file (``optimize(cleanup_older_than=0, delete_unverified=True)``).
"""

from __future__ import annotations

import logging
import time
import warnings
from datetime import timedelta
from pathlib import Path

import lancedb
import numpy as np

from memstack.operators.forget import Tombstones
from memstack.pipelines.forgetting.contract import (
    AuditProbe,
    ForgetReport,
    Residual,
    files_containing,
)
from memstack.pipelines.stores.lance_index import TABLE, IndexPolicy, LanceVectorIndex, quote
from memstack.schemas.rows import EMBEDDING_DIM

log = logging.getLogger(__name__)

NAME = "lancedb"
MAX_SEARCHED_TEXTS = 64
"""Search checks per audit (each text costs a full-text and a vector query); the id, value and
file-byte checks cover every text."""


def id_filter(ids: list[str]) -> str:
    return f"event_id IN ({', '.join(quote(i) for i in ids)})" if ids else "false"


class LanceForgetStore:
    """:class:`~memstack.pipelines.forgetting.contract.Forgettable` over one LanceDB dir."""

    def __init__(self, directory: Path, *, dim: int = EMBEDDING_DIM,
                 policy: IndexPolicy | None = None) -> None:
        self.directory = Path(directory)
        self.index = LanceVectorIndex(self.directory, dim=dim, policy=policy)

    @property
    def name(self) -> str:
        return NAME

    def forget(self, targets: Tombstones) -> ForgetReport:
        began = time.monotonic()
        deleted = {"memories": self.erase(targets)}
        physical = self.purge()
        physical["s"] = time.monotonic() - began
        return ForgetReport(NAME, deleted, physical)

    def erase(self, targets: Tombstones) -> int:
        table = self.index.lance_table
        ids = sorted(targets.event_ids)
        present = 0
        for chunk in _chunks(ids, 500):
            where = id_filter(chunk)
            n = int(table.count_rows(where))
            if n:
                table.delete(where)
                present += n
        return present

    def purge(self) -> dict[str, float]:
        """Rewrite the surviving rows, rebuild indexes, drop tags and every older version."""
        table = self.index.lance_table
        t = time.monotonic()
        survivors = table.to_arrow()
        table.add(survivors, mode="overwrite")
        rewrite_s = time.monotonic() - t
        self.index.maintain(force=True)
        tags = list(table.tags.list())
        for tag in tags:
            table.tags.delete(tag)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "removes every version": intended
            table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
        return {"rewrite_s": rewrite_s, "tags_deleted": float(len(tags)),
                "versions_left": float(len(table.list_versions()))}

    def residuals(self, probe: AuditProbe) -> list[Residual]:
        out: list[Residual] = []
        table = self.index.lance_table
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
        table = self.index.lance_table
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
