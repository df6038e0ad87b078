"""``memstack eval locomo``: evidence recall@k of as-of ``search`` on LoCoMo, vs. baselines.

Every conversation goes THROUGH KAFKA as one session of tenant ``locomo``: each turn a message
(``"Speaker: text [shares an image: caption]"``, occurred at its session date + 30 s per turn),
each session observation a note (subject = the speaker, at the session date). The stores are
then built from the log by the rebuild (the same projector as the live pipeline). For every
question, ``search(question, k=10, kinds=["message"], session=<conversation>)`` runs three
ways in the same run: hybrid (BM25 + vector, RRF), BM25 only and vector only. recall@k is the
fraction of the question's evidence turns among the top k, averaged over questions with
evidence. ``_with_notes`` searches every kind and credits a note with the turns it cites.

The audit errata (``locomo-audit``) are reported both ways: ``_errata_excluded`` drops the
audited questions, ``_errata_corrected`` scores them against the audit's corrected evidence.
``--quick``: the first 2 conversations.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memstack.client import MemoryClient, Written
from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.jobs.eval.locomo_data import (
    CATEGORIES,
    CachedEncoder,
    Conversation,
    Question,
    corrected,
    errata,
    load,
)
from memstack.jobs.measure import Report, Result
from memstack.pipelines.embedding import Encoder, shared_encoder
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event
from memstack.view import MemoryView, SearchMode

log = logging.getLogger(__name__)

TENANT = "locomo"
MODES: tuple[SearchMode, ...] = ("hybrid", "bm25", "vector")
KS = (5, 10)


@dataclass(frozen=True)
class Ingested:
    """Stores rebuilt from the log (read-only), and where the log put every event."""

    stores: Stores
    written: list[Written]


@contextmanager
def ingested(events: Sequence[Event], name: str, report: Report,
             encoder: Encoder | None = None) -> Iterator[Ingested]:
    """Emit ``events`` to a fresh topic set, rebuild stores from the log, yield them read-only."""
    from memstack.infra.net import admin_client
    from memstack.jobs.bench.broker_env import broker_for
    from memstack.pipelines.rebuild import rebuild

    settings = Settings.from_env().with_(topic_prefix=f"eval-{name}-{uuid.uuid4().hex[:8]}")
    with broker_for(settings) as ready, tempfile.TemporaryDirectory() as tmp:
        with MemoryClient(TENANT, "eval", settings=ready) as client:
            written = client.emit_confirmed(list(events))
        report("emitted %d events to %s (%d partitions)", len(written), ready.events_topic,
               len({w.partition for w in written}))
        result = rebuild(ready.bootstrap, ready.events_topic, Path(tmp) / "stores",
                         encoder=encoder or shared_encoder(), keys=FileKeyStore(ready.keys_dir))
        report("rebuilt stores from the log: %d events in %.1f s", result.events, result.seconds)
        try:
            with Stores.open(Path(tmp) / "stores", read_only=True) as stores:
                yield Ingested(stores, written)
        finally:
            try:
                with admin_client(ready.bootstrap) as admin:
                    admin.delete_topics([ready.events_topic, ready.forget_topic,
                                         ready.dlq_topic], raise_errors=False)
            except Exception as exc:  # cleanup must not hide the result
                log.warning("could not delete eval topics: %s", exc)


def events_of(convs: Sequence[Conversation]) -> tuple[list[Event], dict[str, tuple[str, ...]]]:
    """The events to emit, and per event id the evidence turns it stands for."""
    b = EventBuilder(Defaults(tenant=TENANT, agent="locomo", source="locomo10"))
    events: list[Event] = []
    cites: dict[str, tuple[str, ...]] = {}
    for conv in convs:
        for turn in conv.turns:
            role = "user" if turn.speaker == conv.speakers[0] else "assistant"
            event = b.message(conv.sample_id, role, turn.text, occurred_at=turn.at)
            events.append(event)
            cites[event.event_id] = (turn.dia_id,)
        for obs in conv.observations:
            event = b.note(conv.sample_id, obs.text, subject=obs.speaker, occurred_at=obs.at)
            events.append(event)
            cites[event.event_id] = obs.evidence
    return events, cites


Retrieved = dict[tuple[str, str], list[tuple[str, ...]]]
"""(question id, mode) -> per hit of the top 10 (in rank order), the turns it stands for."""


def retrieve(view: MemoryView, convs: Sequence[Conversation], cites: dict[str, tuple[str, ...]],
             report: Report) -> Retrieved:
    out: Retrieved = {}
    at = view.as_of()
    done = 0
    for conv in convs:
        for q in conv.questions:
            if not q.evidence:
                continue
            for mode in MODES:
                hits = at.search(q.question, 10, kinds=["message"], session=conv.sample_id,
                                 mode=mode)
                out[(q.qid, mode)] = [cites[h.event_id] for h in hits]
            hits = at.search(q.question, 10, session=conv.sample_id)
            out[(q.qid, "with_notes")] = [cites[h.event_id] for h in hits]
            done += 1
        report("searched %d questions (%s done)", done, conv.sample_id)
    return out


def recall(questions: Sequence[Question], got: Retrieved, mode: str, k: int) -> float:
    """Mean over questions of |evidence turns among the top k hits| / |evidence turns|."""
    scores = []
    for q in questions:
        found: set[str] = set().union(*got[(q.qid, mode)][:k])
        scores.append(len(found & set(q.evidence)) / len(set(q.evidence)))
    return float(np.mean(scores)) if scores else float("nan")


def figures(convs: Sequence[Conversation], got: Retrieved, report: Report) -> dict[str, float]:
    found = errata()
    questions = [q for c in convs for q in c.questions if q.evidence]
    variants = {
        "": questions,
        "_errata_excluded": [q for q in questions if q.qid not in found],
        "_errata_corrected": [corrected(q, found) for q in questions],
    }
    out: dict[str, float] = {}
    for suffix, qs in variants.items():
        for mode in MODES:
            for k in KS:
                out[f"recall@{k}_{mode}{suffix}"] = recall(qs, got, mode, k)
    by_cat: dict[int, list[Question]] = defaultdict(list)
    for q in questions:
        by_cat[q.category].append(q)
    for cat in sorted(CATEGORIES):
        for mode in MODES:
            out[f"recall@10_{mode}_cat{cat}"] = recall(by_cat[cat], got, mode, 10)
        out[f"questions_cat{cat}"] = float(len(by_cat[cat]))
    out["recall@10_hybrid_with_notes"] = recall(questions, got, "with_notes", 10)
    out["questions"] = float(len(questions))
    out["questions_errata"] = float(sum(1 for q in questions if q.qid in found))
    out["conversations"] = float(len(convs))
    _table(out, report)
    return out


def _table(out: dict[str, float], report: Report) -> None:
    report("%-12s %8s %8s %8s %6s", "category", "hybrid", "bm25", "vector", "n")
    for cat, name in sorted(CATEGORIES.items()):
        report("%-12s %8.3f %8.3f %8.3f %6d", f"{cat} {name}", out[f"recall@10_hybrid_cat{cat}"],
               out[f"recall@10_bm25_cat{cat}"], out[f"recall@10_vector_cat{cat}"],
               int(out[f"questions_cat{cat}"]))
    report("%-12s %8.3f %8.3f %8.3f %6d   (recall@10)", "all", out["recall@10_hybrid"],
           out["recall@10_bm25"], out["recall@10_vector"], int(out["questions"]))


def run(quick: bool, report: Report, base: Encoder | None = None) -> Result:
    """``base``: the encoder to evaluate (default: the ``MEMSTACK_ENCODER`` setting's)."""
    convs = load(2 if quick else None)
    events, cites = events_of(convs)
    report("LoCoMo: %d conversations, %d events (%d turns), %d questions", len(convs),
           len(events), sum(len(c.turns) for c in convs), sum(len(c.questions) for c in convs))
    encoder = CachedEncoder(base or shared_encoder())
    with ingested(events, "locomo", report, encoder.base) as done:
        view = MemoryView(TENANT, done.stores, encoder=encoder)
        encoder.prime([q.question for c in convs for q in c.questions])
        got = retrieve(view, convs, cites, report)
    return Result("eval locomo", figures(convs, got, report))
