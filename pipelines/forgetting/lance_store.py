"""Forgetting in the LanceDB memories table: rows, indexes and every old version.

Two phases. :meth:`LanceForgetStore.erase` is a Lance ``delete``: it writes a deletion file,
so reads no longer see the row, but the row stays in its data file, in every older version
(``checkout`` brings it back) and in the index files. :meth:`LanceForgetStore.purge` then
rewrites only the fragments that have a deletion file (maintenance keeps fragments at most
``IndexPolicy.fragment_rows``, so this is bounded), lets Lance remap every index to the
rewritten rows, deletes tags (a tagged version would keep the content) and removes every older
version with the files only they reference.

What the remap keeps (measured with pylance 14.0.2, see docs/forget.md): the full-text index is
rewritten without the deleted documents (document count, token dictionary and BM25 scores equal
a clean build's written the same way), so it is rebuilt only when it still holds rows that are
gone (a delete that dropped a whole fragment: no compaction remaps that); IVF_PQ keeps the
centroids and codebooks it was trained with (a forgotten vector's share of the training, not
its code) until
:meth:`~memstack.pipelines.stores.lance_index.LanceVectorIndex.retrain_vector_index` runs, which
a purge does when the index holds rows that are gone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np

from memstack.operators.forget import Tombstones
from memstack.pipelines.forgetting.contract import (
    AuditProbe,
    ForgetReport,
    Residual,
    erased_then_purged,
    files_containing,
)
from memstack.pipelines.stores import lance_capped, lance_files
from memstack.pipelines.stores.lance_index import (
    TABLE,
    TEXT_INDEX,
    VECTOR_INDEX,
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


def id_filter(ids: list[str]) -> str:
    """The memory rows of events ``ids``: a memory row's ``memory_id`` is its event's id
    (:func:`memstack.operators.records.memory_row`), and ``memory_id`` has a BTREE index, so
    this is a look-up where a filter on ``event_id`` scans every row (31 ms per event-scope
    resolution at 200k rows, measured)."""
    return f"memory_id IN ({', '.join(quote(i) for i in ids)})" if ids else "false"


class LanceForgetStore:
    """:class:`~memstack.pipelines.forgetting.contract.Forgettable` over one LanceDB dir."""

    def __init__(self, directory: Path, *, dim: int = EMBEDDING_DIM,
                 policy: IndexPolicy | None = None, rebuild_text: bool = False) -> None:
        """``rebuild_text``: rebuild the full-text index in every purge (linear in the table,
        ~0.9 s at 200k rows) instead of trusting its remap. Off by default: the remap drops
        the deleted documents (document count, dictionary and BM25 scores equal a clean build
        written in the same segments: tests/forget/test_lance_purge.py), and a purge rebuilds
        anyway when an index still holds more rows than the live ones
        (:func:`~memstack.pipelines.stores.lance_files.index_overcount`: a delete that dropped
        a whole fragment, which no compaction remaps)."""
        self.directory = Path(directory)
        self.index = LanceVectorIndex(self.directory, dim=dim, policy=policy)
        self.rebuild_text = rebuild_text
        self._purging = threading.Lock()

    @classmethod
    def over(cls, index: LanceVectorIndex, *, rebuild_text: bool = False) -> LanceForgetStore:
        """A forget store over an index that is already open (the live writer's; erase then
        runs on the writer's handle, so the writer's reads see the deletion at once)."""
        store = cls.__new__(cls)
        store.directory, store.index = index.directory, index
        store.rebuild_text, store._purging = rebuild_text, threading.Lock()
        return store

    @property
    def name(self) -> str:
        return NAME

    def forget(self, targets: Tombstones) -> ForgetReport:
        """:meth:`erase`, then :meth:`purge` (the batch paths and the contract suite)."""
        return erased_then_purged(NAME, targets, self.erase, self.purge)

    def erase(self, targets: Tombstones) -> dict[str, int]:
        """:meth:`erase_all` of one request."""
        return self.erase_all([targets])[0]

    def erase_all(self, batch: Sequence[Tombstones]) -> list[dict[str, int]]:
        """The logical phase of a batch (disjoint targets): Lance deletes of the targets' rows
        (deletion files only; reads stop seeing them at once), 500 ids a commit. Per request,
        the memory rows deleted."""
        table = self.index.lance_table
        owner = {i: n for n, targets in enumerate(batch) for i in targets.event_ids}
        deleted = [{"memories": 0} for _ in batch]
        for chunk in _chunks(sorted(owner), 500):
            where = id_filter(chunk)
            n = int(table.count_rows(where))
            if not n:
                continue
            present = table.search().where(where).select(["event_id"]).limit(n).to_arrow()
            for event_id in present.column("event_id").to_pylist():
                deleted[owner[event_id]]["memories"] += 1
            table.delete(where)
        return deleted

    def purge(self, probes: Sequence[bytes] = (),
              exclusive: Callable[[], AbstractContextManager[None]] = nullcontext,
              ) -> dict[str, float]:
        """The physical phase, bounded by the fragments that hold deleted rows. The rewrite
        runs inside ``exclusive()`` (measured: with hides going on, their deletes preempted
        every commit of it), and so does the removal of older versions (a reader or a hide may
        be on one); the full-text rebuild makes a new version beside them.

        Needs no ids: the deletion files say what to materialise, so every erase since the
        last purge (several requests, or a restart) is purged at once. Safe beside the live
        writer: it works on its own dataset handles, retries commit conflicts, and takes the
        index's writer lock only to move the writer's handle to the latest version (~1 ms)
        before removing older versions. Files that no version references (an in-flight
        write's) are never deleted; ``probes`` (forgotten texts as bytes) are searched for in
        such files and counted in ``unreferenced_probe_files``.
        """
        with self._purging, self.index.maintenance_paused():
            began = time.monotonic()
            figures = self._purge(probes, exclusive)
            figures["s"] = time.monotonic() - began
            return figures

    def _purge(self, probes: Sequence[bytes],
               exclusive: Callable[[], AbstractContextManager[None]]) -> dict[str, float]:
        uri = self.index.uri
        dataset = lance_files.latest(uri)
        if not (lance_files.deleted_fragments(dataset) or _tags(dataset)
                or len(dataset.versions()) > 1):
            return {"compact_s": 0.0, "fts_s": 0.0, "cleanup_s": 0.0, "fragments_rewritten": 0.0,
                    "rows_rewritten": 0.0, "tags_deleted": 0.0, "versions_left": 1.0,
                    "unreferenced_probe_files": 0.0}
        t = time.monotonic()
        with exclusive():  # a hide's delete in the same fragment would preempt it, again and again
            rewrite = lance_files.rewrite_deleted(uri, self.index.policy.fragment_rows)
        compact_s, t = time.monotonic() - t, time.monotonic()
        text_over, vector_over = self._overcounts()
        if self.rebuild_text or text_over:
            self._rebuild_text()
        if vector_over:  # linear (tens of seconds at 200k rows), and rare
            log.warning("the vector index of %s holds %d rows that are gone (a whole fragment "
                        "was deleted); training it again", self.directory, vector_over)
            self.index.retrain_vector_index()
        fts_s, t = time.monotonic() - t, time.monotonic()
        with exclusive():
            tags = self._drop_versions()
        cleanup_s = time.monotonic() - t
        return {"compact_s": compact_s, "fts_s": fts_s, "cleanup_s": cleanup_s,
                "text_rebuilt": float(bool(self.rebuild_text or text_over)),
                "vector_retrained": float(vector_over > 0),
                "fragments_rewritten": float(rewrite.fragments),
                "rows_rewritten": float(rewrite.rows), "tags_deleted": float(tags),
                "versions_left": float(len(lance_files.latest(uri).versions())),
                "unreferenced_probe_files": float(len(self._unreferenced_hits(probes)))}

    def _overcounts(self) -> tuple[int, int]:
        """Rows the full-text and the vector index hold beyond the live ones, after the rewrite
        (0, 0 while a fragment has a deletion file: a hide since, which the next purge takes)."""
        dataset = lance_files.latest(self.index.uri)
        if lance_files.deleted_fragments(dataset):
            return 0, 0
        return (lance_files.index_overcount(dataset, TEXT_INDEX),
                lance_files.index_overcount(dataset, VECTOR_INDEX))

    def _rebuild_text(self) -> None:
        """The full-text index built again from the rows there are now (own handles), in
        segments as every index is built (:mod:`~memstack.pipelines.stores.lance_capped`)."""
        lance_capped.build_scalar(self.index.uri, "text", "INVERTED", TEXT_INDEX,
                                  self.index.policy.segment_rows, **lance_capped.fts_params())

    def _drop_versions(self) -> int:
        """Delete every tag, then every version but the latest. A tag created meanwhile makes
        the cleanup refuse (rather than skip the tagged version): then again, once."""
        deleted = 0
        for attempt in range(2):
            dataset = lance_files.latest(self.index.uri)
            for tag in _tags(dataset):
                dataset.tags.delete(tag)
                deleted += 1
            try:
                with self.index.quiesced():  # no write in flight: unreferenced files can go
                    lance_files.drop_versions(self.index.uri, timedelta(0), unreferenced=True)
                return deleted
            except (OSError, ValueError, RuntimeError) as exc:
                if "tag" not in str(exc).lower() or attempt:
                    raise
        return deleted

    def _unreferenced_hits(self, probes: Sequence[bytes]) -> list[str]:
        """Data files the latest version does not reference that hold a probe (an in-flight
        or failed write's: the cleanup keeps them, see :func:`lance_files.drop_versions`)."""
        if not probes:
            return []
        dataset = lance_files.latest(self.index.uri)
        used = {d.path.rsplit("/", 1)[-1] for f in dataset.get_fragments()
                for d in f.data_files()}
        data = Path(self.index.uri) / "data"
        files = [str(p) for p in data.glob("*") if p.is_file() and p.name not in used]
        return list(files_containing(files, list(probes)))

    def residuals(self, probe: AuditProbe) -> list[Residual]:
        out: list[Residual] = []
        table = self.index.lance_table
        ids = sorted(probe.event_ids)
        rows = sum(int(table.count_rows(id_filter(c))) for c in _chunks(ids, 500))
        if rows:
            out.append(Residual(NAME, "rows", rows, "memories"))
        out += self._old_versions(ids)
        out += self._search_residuals(probe)
        # data files: Lance compresses string pages, so raw bytes prove nothing there; their
        # text column is decoded instead (referenced or not, any version's). Every other file
        # (indexes, deletion files, manifests) is scanned raw.
        files = [str(p) for p in self.directory.rglob("*")
                 if p.is_file() and not (p.suffix == ".lance" and p.parent.name == "data")]
        hits = files_containing(files, probe.byte_probes)
        hits |= lance_files.data_files_holding(str(self.directory), "text", list(probe.texts))
        out += [Residual(NAME, "file_bytes", n, path) for path, n in hits.items()]
        return out

    def _old_versions(self, ids: list[str]) -> list[Residual]:
        """Open each older version (and tag) read-only; any forgotten row there is readable.
        Every version's rows come from the data files, so when no data file holds any of the
        ids (their decoded ``event_id`` column, cached per immutable file) no version is
        opened: the live writer adds a version per batch, and opening each, for each audit,
        made the audits of a batch slower and slower (20 s each at 100k rows after minutes of
        ingest)."""
        table = self.index.lance_table
        versions = [int(v["version"]) for v in table.list_versions()]
        tags = list(table.tags.list())
        older = [v for v in versions if v != table.version]
        if not older and not tags:
            return []
        if older and not lance_files.data_files_with(str(self.directory), "event_id", ids):
            older = []  # no data file holds them: no version can (ingest adds a version a batch)
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


def _tags(dataset: Any) -> list[str]:
    return list(dataset.tags.list())


def _fts(text: str) -> str:
    words = "".join(c if c.isalnum() else " " for c in text).split()
    return " ".join(words[:32]) or "_"


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i:i + size] for i in range(0, len(items), size)] or [[]]
