"""The forget evaluation's oracle: the stores after forgetting equal a clean build from the log
that never saw the forgotten events, store by store, decided without the system's audit, its
scope predicate or its forget path.

- :func:`matches` / :func:`in_scope` restate the scope semantics of docs/forget.md (event,
  session, subject, tenant, fact pattern; logged no later than the request) from the event
  objects the evaluation emitted, so the forgotten set is the evaluation's own;
- :class:`CleanBuild` filters those events out of the log's records **before projection** and
  projects the rest into fresh stores (the evaluation's own plaintext, no ledger, no keys, no
  forget processor: a system that destroys keys or rewrites files cannot change the
  reference), with the live stores' own embeddings, then compares every table's content
  (records, fact entries, fact versions, memory rows with their vectors), the rows the
  full-text search of every forgotten text finds (and the live text index's document count),
  and the live LanceDB history (no tag, and no older version that still holds a forgotten
  row).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from memstack.operators.forget import ForgetRequest
from memstack.operators.relations import RelationRegistry
from memstack.pipelines.embedding import CachingEncoder, Encoder
from memstack.pipelines.log_reader import LogRecord, read_bounded
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores import lance_files
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.lance_index import TEXT_INDEX, LanceVectorIndex
from memstack.schemas.events import Event, ForgetScope
from memstack.schemas.sealed import parse_record

BATCH = 2000


def matches(scope: ForgetScope, tenant: str, event: Event) -> bool:
    """Whether ``scope`` in ``tenant`` names ``event``, whenever either was logged."""
    if event.tenant != tenant:
        return False
    if scope.type == "tenant":
        return True
    if scope.type == "event":
        return event.event_id == scope.event_id
    if scope.type == "session":
        return event.session == scope.session
    if scope.type == "subject":
        return event.subject == scope.subject
    relation = getattr(event.payload, "relation", None)
    if event.kind not in ("fact_asserted", "fact_retracted") or (
            event.subject, relation) != (scope.subject, scope.relation):
        return False
    value = getattr(event.payload, "object", None)
    if event.kind == "fact_retracted" and value is None:
        return False  # a retraction naming no value carries nothing to forget
    return scope.object is None or value == scope.object


def in_scope(scope: ForgetScope, tenant: str, requested_at: datetime, event: Event,
             logged_at: datetime) -> bool:
    """Whether a request (``scope`` in ``tenant``, logged at ``requested_at``) forgets
    ``event`` (logged at ``logged_at``): what was logged after the request is new data."""
    return logged_at <= requested_at and matches(scope, tenant, event)


def forgotten_by(request: ForgetRequest, events: Sequence[Event],
                 logged: dict[str, datetime]) -> set[str]:
    return {e.event_id for e in events
            if in_scope(request.scope, request.tenant, request.log_time, e, logged[e.event_id])}


@dataclass(frozen=True)
class Verdict:
    equal: bool
    differing: tuple[str, ...]
    """Tables, ``text_hits`` or ``lance_history`` that differ from the clean build."""
    preserved: bool
    """Every item to preserve is in the live stores exactly as in the clean build (and there
    is at least one)."""


class CleanBuild:
    """Clean rebuilds from the log for one evaluation run (embeddings reused from live)."""

    def __init__(self, bootstrap: str, topic: str, events: Sequence[Event], directory: Path,
                 encoder: Encoder, registry: RelationRegistry) -> None:
        self.topic, self.directory, self.registry = topic, directory, registry
        self.encoder = CachingEncoder(encoder, capacity=1_000_000)
        plain = {e.event_id: e.to_json() for e in events}
        self.records = [replace(r, value=plain[i]) for r in read_bounded(bootstrap, topic)
                        if (i := event_id_of(r)) is not None and i in plain]
        """The log's records (positions as logged), with the emitted plaintext as value."""

    def remember_live(self, live: Stores) -> None:
        """Reuse the live stores' embeddings, so content equality is exact."""
        table = live.vectors.table().select(["memory_id", "text"])
        ids, texts = table.column(0).to_pylist(), table.column(1).to_pylist()
        if ids:
            self.encoder.remember(texts, live.vectors.vectors_of(ids))

    def compare(self, live: Stores, gone: set[str], texts: Sequence[str],
                preserve: Sequence[str]) -> Verdict:
        clean_dir = self.directory / "clean"
        shutil.rmtree(clean_dir, ignore_errors=True)
        with Stores.open(clean_dir) as clean:
            self.project(clean, gone)
            want, got = clean.content_hashes(), live.content_hashes()
            differing = [t for t in want if t != "offsets" and want[t] != got.get(t)]
            if not same_hits(live, clean, texts, gone):
                differing.append("text_hits")
            preserved = bool(preserve) and all(
                snapshot(live, i) == snapshot(clean, i) is not None for i in preserve)
        if gone and history_holds(live, gone):
            differing.append("lance_history")
        shutil.rmtree(clean_dir, ignore_errors=True)
        return Verdict(not differing, tuple(differing), preserved)

    def project(self, stores: Stores, gone: set[str]) -> None:
        """Project every record but those of ``gone`` (the filter runs before projection),
        then build the indexes once over exactly those rows: the reference is an index that
        never held anything else (an index grown batch by batch scores full-text hits with
        other statistics than one built at once, whatever was forgotten)."""
        projector = StoreProjector(stores, self.encoder, self.topic, self.registry,
                                   maintain_indexes=False)
        kept = [r for r in self.records if event_id_of(r) not in gone]
        for lo in range(0, len(kept), BATCH):
            projector.commit(projector.prepare(kept[lo:lo + BATCH]))
        stores.vectors.maintain(force=True)


def history_holds(stores: Stores, gone: set[str]) -> bool:
    """Whether a tag or a version older than the current one still holds a row of ``gone``
    (``checkout`` would bring it back)."""
    vectors = stores.vectors
    assert isinstance(vectors, LanceVectorIndex)
    dataset = vectors.lance_table.to_lance()
    if list(dataset.tags.list()):
        return True
    ids = ", ".join("'" + i.replace("'", "''") + "'" for i in sorted(gone))
    for v in dataset.versions()[:-1]:
        old = dataset.checkout_version(v["version"])
        if old.count_rows(filter=f"event_id IN ({ids})") > 0:
            return True
    return False


def snapshot(stores: Stores, event_id: str) -> object:
    """An item's record, memory row and rounded vector (None when the record is absent)."""
    record = stores.events.record(event_id)
    if record is None:
        return None
    rows = stores.vectors.get([event_id])
    vectors = stores.vectors.vectors_of([event_id]).round(4).tolist() if rows else []
    return record, rows, vectors


def event_id_of(record: LogRecord) -> str | None:
    if record.value is None:
        return None
    return parse_record(record.value).event_id  # sealed records keep the envelope in clear


def same_hits(live: Stores, clean: Stores, texts: Sequence[str], gone: set[str]) -> bool:
    """The full-text search of every forgotten text finds exactly the rows it finds in the clean
    build, in every tenant, none of them forgotten; and the live full-text index holds no row
    that is gone (its document count is the live rows').

    Rows, not scores: BM25 is scored per index segment, and the live index (grown by
    maintenance, one segment per refresh, and remapped by each purge) is laid out in other
    segments than the reference, built at once, so its scores differ by about 0.5% whatever
    was forgotten (measured, docs/forget.md). A forgotten document still in the index would
    be counted (:func:`lance_files.index_overcount`, Lance's own statistics); that the remap
    also leaves the dictionary and the BM25 statistics as a clean build's is checked on a
    clean build written in the same segments (tests/forget/test_lance_purge.py)."""
    tenants = sorted(set(clean.vectors.table().select(["tenant"]).column(0).to_pylist()))
    for text in texts[:16]:
        words = " ".join("".join(c if c.isalnum() else " " for c in text).split()[:32]) or "_"
        for tenant in tenants:
            got = hits_of(live, words, tenant)
            if got != hits_of(clean, words, tenant) or got & gone:
                return False
    vectors = live.vectors
    assert isinstance(vectors, LanceVectorIndex)
    return lance_files.index_overcount(vectors.lance_table.to_lance(), TEXT_INDEX) == 0


def hits_of(stores: Stores, words: str, tenant: str) -> frozenset[str]:
    """The event ids of every row the full-text search of ``words`` finds in ``tenant``."""
    limit = max(1, stores.vectors.count())
    return frozenset(h.row.event_id for h in stores.vectors.search_text(words, tenant=tenant,
                                                                        k=limit))
