"""``memstack eval locomo``: evidence recall@k of as-of ``search`` on LoCoMo, vs. baselines.

Every conversation goes THROUGH KAFKA as one session of tenant ``locomo``: each turn a message
(``"Speaker: text [shares an image: caption]"``, occurred at its session date + 30 s per turn),
each session observation a note (subject = the speaker, at the session date). The stores are
then built from the log by the rebuild (the same projector as the live pipeline). For every
question, ``search(question, k=10, kinds=["message"], session=<conversation>)`` runs in the
same run: hybrid (the product's ranking: focus, BM25 + vector fused by RRF, neighbours), BM25
only and vector only (the baselines), and hybrid under every ranking of the tuning grid
(:mod:`memstack.jobs.eval.locomo_tuning`: the ablation of the ranking's stages and
``recall@k_hybrid_heldout``, every choice made without the conversation it is scored on).
recall@k is the fraction of the question's evidence turns among the top k, averaged over
questions with evidence. ``search_p50_ms`` / ``_p99_ms``: each search under the default
ranking, the questions encoded beforehand in one batch (the encoding is not in it; a focused
query's encoding is paid by the grid's first ranking that focuses it). ``_with_notes``
searches every kind and credits a note with the turns it cites.

The audit errata (``locomo-audit``) are reported both ways: ``_errata_excluded`` drops the
audited questions, ``_errata_corrected`` scores them against the audit's corrected evidence.
``--quick``: the first 2 conversations.
"""

from __future__ import annotations

import logging
import tempfile
import time
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
from memstack.jobs.eval.locomo_tuning import ABLATION, GRID, best, leave_one_out, name
from memstack.jobs.measure import Report, Result
from memstack.pipelines.embedding import Encoder, shared_encoder
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event
from memstack.view import MemoryView, SearchMode
from memstack.view.search import FUSED_ONLY, RANKING

log = logging.getLogger(__name__)

TENANT = "locomo"
MODES: tuple[SearchMode, ...] = ("hybrid", "bm25", "vector")
KS = (5, 10)
CONTEXT_BUDGET = 2000


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
             report: Report, turns: frozenset[str] = frozenset(), *,
             tuned: bool = True, times: list[float] | None = None) -> Retrieved:
    """Every question searched: hybrid under every ranking of the tuning grid (``hybrid`` is
    the product's default ranking), each single leg, hybrid over every kind, and its
    ``context()`` under :data:`CONTEXT_BUDGET` tokens (``context``: the turns among its items,
    ``turns`` being the ids of the turns' events; ``context_with_notes``: notes credited with
    the turns they cite). ``tuned=False``: the default ranking, the legs and hybrid over every
    kind only (no grid, no context). ``times``: the milliseconds of
    each search under the default ranking are appended to it."""
    out: Retrieved = {}
    at = view.as_of()
    done = 0
    for conv in convs:
        for q in conv.questions:
            if not q.evidence:
                continue
            for ranking in GRID if tuned else (RANKING,):
                began = time.perf_counter()
                hits = at.search(q.question, 10, kinds=["message"], session=conv.sample_id,
                                 ranking=ranking)
                if times is not None and ranking == RANKING:
                    times.append((time.perf_counter() - began) * 1000)
                out[(q.qid, name(ranking))] = [cites[h.event_id] for h in hits]
            out[(q.qid, "hybrid")] = out[(q.qid, name(RANKING))]
            for mode in MODES[1:]:
                hits = at.search(q.question, 10, kinds=["message"], session=conv.sample_id,
                                 mode=mode)
                out[(q.qid, mode)] = [cites[h.event_id] for h in hits]
            hits = at.search(q.question, 10, session=conv.sample_id)
            out[(q.qid, "with_notes")] = [cites[h.event_id] for h in hits]
            if not tuned:
                done += 1
                continue
            context = at.context(q.question, CONTEXT_BUDGET, session=conv.sample_id)
            out[(q.qid, "context")] = [cites[i.event_id] for i in context.items
                                       if i.event_id in cites and i.event_id in turns]
            out[(q.qid, "context_with_notes")] = [cites[i.event_id] for i in context.items
                                                  if i.event_id in cites]
            done += 1
        report("searched %d questions (%s done)", done, conv.sample_id)
    return out


def all_found(questions: Sequence[Question], got: Retrieved, mode: str) -> float:
    """The share of questions whose evidence turns are all among the items of ``mode``."""
    whole = [set(q.evidence) <= set().union(*got[(q.qid, mode)]) for q in questions]
    return float(np.mean(whole)) if whole else float("nan")


def scores(questions: Sequence[Question], got: Retrieved, mode: str, k: int) -> list[float]:
    """Per question: |evidence turns among the top k hits| / |evidence turns|."""
    out = []
    for q in questions:
        found: set[str] = set().union(*got[(q.qid, mode)][:k])
        out.append(len(found & set(q.evidence)) / len(set(q.evidence)))
    return out


def recall(questions: Sequence[Question], got: Retrieved, mode: str, k: int) -> float:
    """Mean over questions of |evidence turns among the top k hits| / |evidence turns|."""
    found = scores(questions, got, mode, k)
    return float(np.mean(found)) if found else float("nan")


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
    if questions and (questions[0].qid, "context") in got:
        out[f"context_evidence_rate_{CONTEXT_BUDGET}"] = all_found(questions, got, "context")
        out[f"context_evidence_rate_{CONTEXT_BUDGET}_with_notes"] = all_found(
            questions, got, "context_with_notes")
    if questions and (questions[0].qid, name(FUSED_ONLY)) in got:
        out.update(tuning(convs, got, report))
    out["questions"] = float(len(questions))
    out["questions_errata"] = float(sum(1 for q in questions if q.qid in found))
    out["conversations"] = float(len(convs))
    _table(out, report)
    return out


def tuning(convs: Sequence[Conversation], got: Retrieved, report: Report) -> dict[str, float]:
    """The ablation of the ranking's stages, and recall with every choice held out."""
    out: dict[str, float] = {}
    questions = {c.sample_id: [q for q in c.questions if q.evidence] for c in convs}
    everything = [q for qs in questions.values() for q in qs]
    for label, ranking in ABLATION.items():
        for k in KS:
            out[f"recall@{k}_{label}"] = recall(everything, got, name(ranking), k)
    by_k = {k: {c: {r: scores(qs, got, name(r), k) for r in GRID}
                for c, qs in questions.items()} for k in KS}
    held = leave_one_out(by_k[10])
    for k in KS:
        per_question = [x for c in sorted(questions)
                        for x in by_k[k][c][held.chosen[c]]]
        out[f"recall@{k}_hybrid_heldout"] = float(np.mean(per_question))
    for cat in sorted(CATEGORIES):
        cat_scores = [x for c in sorted(questions)
                      for q, x in zip(questions[c], by_k[10][c][held.chosen[c]], strict=True)
                      if q.category == cat]
        out[f"recall@10_hybrid_heldout_cat{cat}"] = float(np.mean(cat_scores))
    overall = best(by_k[10], sorted(questions))
    out["heldout_choice_is_default_rate"] = float(np.mean(
        [held.chosen[c] == RANKING for c in questions]))
    for c in sorted(questions):
        report("held out %s: ranking chosen on the others %s", c, name(held.chosen[c]))
    report("chosen on all conversations: %s; the product's default: %s", name(overall),
           name(RANKING))
    report("ablation recall@10: %s", ", ".join(
        f"{label} {out[f'recall@10_{label}']:.3f}" for label in ABLATION))
    return out


def _table(out: dict[str, float], report: Report) -> None:
    report("%-12s %8s %8s %8s %6s", "category", "hybrid", "bm25", "vector", "n")
    for cat, label in sorted(CATEGORIES.items()):
        report("%-12s %8.3f %8.3f %8.3f %6d", f"{cat} {label}", out[f"recall@10_hybrid_cat{cat}"],
               out[f"recall@10_bm25_cat{cat}"], out[f"recall@10_vector_cat{cat}"],
               int(out[f"questions_cat{cat}"]))
    report("%-12s %8.3f %8.3f %8.3f %6d   (recall@10)", "all", out["recall@10_hybrid"],
           out["recall@10_bm25"], out["recall@10_vector"], int(out["questions"]))


def run(quick: bool, report: Report, base: Encoder | None = None, *,
        tuned: bool = True) -> Result:
    """``base``: the encoder to evaluate (default: the ``MEMSTACK_ENCODER`` setting's);
    ``tuned=False`` leaves out the ranking grid and the context (see :func:`retrieve`)."""
    convs = load(2 if quick else None)
    events, cites = events_of(convs)
    turns = frozenset(e.event_id for e in events if e.kind == "message")
    report("LoCoMo: %d conversations, %d events (%d turns), %d questions", len(convs),
           len(events), sum(len(c.turns) for c in convs), sum(len(c.questions) for c in convs))
    encoder = CachedEncoder(base or shared_encoder())
    with ingested(events, "locomo", report, encoder.base) as done:
        view = MemoryView(TENANT, done.stores, encoder=encoder)
        encoder.prime([q.question for c in convs for q in c.questions])
        times: list[float] = []
        got = retrieve(view, convs, cites, report, turns, tuned=tuned, times=times)
    out = figures(convs, got, report)
    out["search_p50_ms"] = float(np.percentile(times, 50)) if times else float("nan")
    out["search_p99_ms"] = float(np.percentile(times, 99)) if times else float("nan")
    report("search (the default ranking; questions encoded beforehand): p50 %.1f ms, "
           "p99 %.1f ms", out["search_p50_ms"], out["search_p99_ms"])
    return Result("eval locomo", out)
