"""The forget evaluation's oracle: the stores after forgetting equal a clean build without the
forgotten events, store by store, decided without the system's audit or scope predicate.

- :func:`in_scope` restates the scope semantics of docs/forget.md (event, session, subject,
  tenant, fact pattern; logged no later than the request) from the event objects the
  evaluation emitted, so the forgotten set is the evaluation's own;
- :class:`CleanBuild` rebuilds stores from the log's positions and the evaluation's own
  plaintext events **without those events** (no ledger, no keys: a system that destroys keys
  cannot change the reference) with the live stores' own embeddings, and
  compares every table's content (records, fact entries, fact versions, memory rows with their
  vectors), the full-text hits of every forgotten text, and the live LanceDB history (one
  version, no tag).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from memstack.operators.forget import ForgetRequest
from memstack.operators.relations import RelationRegistry
from memstack.pipelines.embedding import CachingEncoder, Encoder
from memstack.pipelines.forgetting import ForgetStores
from memstack.pipelines.forgetting.lance_store import table_of
from memstack.pipelines.log_reader import LogRecord, read_bounded
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event, ForgetScope
from memstack.schemas.sealed import parse_record


def in_scope(scope: ForgetScope, tenant: str, requested_at: datetime, event: Event,
             logged_at: datetime) -> bool:
    """Whether a request (``scope`` in ``tenant``, logged at ``requested_at``) forgets
    ``event`` (logged at ``logged_at``): the evaluation's own reading of docs/forget.md."""
    if event.tenant != tenant or logged_at > requested_at:
        return False
    if scope.type == "tenant":
        return True
    if scope.type == "event":
        return event.event_id == scope.event_id
    if scope.type == "session":
        return event.session == scope.session
    if scope.type == "subject":
        return event.subject == scope.subject
    payload = event.payload
    relation = getattr(payload, "relation", None)
    if event.kind not in ("fact_asserted", "fact_retracted") or (
            event.subject, relation) != (scope.subject, scope.relation):
        return False
    value = getattr(payload, "object", None)
    if event.kind == "fact_retracted" and value is None:
        return False  # a retraction naming no value carries nothing to forget
    return scope.object is None or value == scope.object


def forgotten_by(request: ForgetRequest, events: list[Event],
                 logged: dict[str, datetime]) -> set[str]:
    return {e.event_id for e in events
            if in_scope(request.scope, request.tenant, request.log_time, e, logged[e.event_id])}


@dataclass(frozen=True)
class Verdict:
    equal: bool
    differing: tuple[str, ...]
    """Tables, ``text_hits`` or ``lance_history`` that differ from the clean build."""
    preserved: bool
    """The items to preserve are in the live stores exactly as in the clean build."""


class CleanBuild:
    """Clean rebuilds from the log for one evaluation run (embeddings reused from live)."""

    def __init__(self, bootstrap: str, topic: str, events: list[Event], directory: Path,
                 encoder: Encoder, registry: RelationRegistry) -> None:
        self.topic, self.directory, self.registry = topic, directory, registry
        self.encoder = CachingEncoder(encoder, capacity=1_000_000)
        plain = {e.event_id: e.to_json() for e in events}
        self.records = [replace(r, value=plain[i]) for r in read_bounded(bootstrap, topic)
                        if (i := _event_id(r)) is not None and i in plain]
        """The log's records (positions as logged), with the emitted plaintext as value."""

    def remember_live(self, live: ForgetStores) -> None:
        """Reuse the live stores' embeddings, so content equality is exact."""
        table = table_of(live.lance.index).to_arrow().select(["memory_id", "text"])
        ids, texts = table.column(0).to_pylist(), table.column(1).to_pylist()
        if ids:
            self.encoder.remember(texts, live.lance.index.vectors_of(ids))

    def compare(self, live: ForgetStores, gone: set[str], texts: list[str],
                preserve: list[str]) -> Verdict:
        clean_dir = self.directory / "clean"
        shutil.rmtree(clean_dir, ignore_errors=True)
        with Stores.open(clean_dir) as clean:
            self._project(clean, gone)
            want = clean.content_hashes()
            got = live.stores.content_hashes()
            differing = [t for t in want if t != "offsets" and want[t] != got.get(t)]
            if not _same_hits(live.stores, clean, texts):
                differing.append("text_hits")
            preserved = bool(preserve) and all(
                _snapshot(live.stores, i) == _snapshot(clean, i) is not None for i in preserve)
        table = table_of(live.lance.index)
        if len(table.list_versions()) != 1 or list(table.tags.list()):
            differing.append("lance_history")
        return Verdict(not differing, tuple(differing), preserved)

    def _project(self, stores: Stores, gone: set[str]) -> None:
        projector = StoreProjector(stores, self.encoder, self.topic, self.registry)
        kept = [r for r in self.records if _event_id(r) not in gone]
        for lo in range(0, len(kept), 2000):
            projector.commit(projector.prepare(kept[lo:lo + 2000]))
        stores.vectors.maintain()


def _snapshot(stores: Stores, event_id: str) -> object:
    """An item's record, memory row and rounded vector (None when the record is absent)."""
    record = stores.events.record(event_id)
    if record is None:
        return None
    rows = stores.vectors.get([event_id])
    vectors = stores.vectors.vectors_of([event_id]).round(4).tolist() if rows else []
    return record, rows, vectors


def _event_id(record: LogRecord) -> str | None:
    if record.value is None:
        return None
    return parse_record(record.value).event_id  # sealed records keep the envelope in clear


def _same_hits(live: Stores, clean: Stores, texts: list[str]) -> bool:
    """The full-text hits of every forgotten text are the clean build's (ranks above the
    last score returned: rows tied at the cut-off may come in either order)."""
    for text in texts[:16]:
        words = " ".join("".join(c if c.isalnum() else " " for c in text).split()[:32]) or "_"
        for tenant in _tenants(clean):
            if _above_cut(live, words, tenant) != _above_cut(clean, words, tenant):
                return False
    return True


def _above_cut(stores: Stores, words: str, tenant: str) -> set[tuple[str, float]]:
    hits = stores.vectors.search_text(words, tenant=tenant, k=6)
    if not hits:
        return set()
    cut = min(h.score for h in hits)
    return {(h.row.memory_id, round(h.score, 4)) for h in hits if h.score > cut + 1e-6}


def _tenants(stores: Stores) -> list[str]:
    table = table_of(stores.vectors).to_arrow().select(["tenant"])
    return sorted(set(table.column(0).to_pylist()))
