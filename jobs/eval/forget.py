"""``memstack eval forget``: forget requests of every scope over the LoCoMo conversations.

Each conversation is a tenant, each session a session, each speaker a subject; turns are
sealed messages, per-session observations are multi-valued facts and ``last_session`` a
single-valued one. Requests (event, fact, session, subject, tenant) are emitted to the real
broker and applied to real DuckDB/LanceDB stores with the real model. A tenant request is
emitted (after the live stores took in the rest) before the tenant's last session, so every
request has same-tenant items outside its scope (a request with none is counted as a generator
error and fails). Per request:

- removal, by the oracle (``jobs/eval/forget_oracle.py``, independent of the audit and of the
  system's scope code): every store's content equals a clean build from the log without the
  events forgotten so far (``oracle_equal_rate``); the system's own audit is reported apart;
- preservation: same-tenant items outside every scope so far are unchanged;
- replay: a rebuild through the ledger holds none of the forgotten events and every kept one;
- extraction: partial-text and reworded searches surface nothing forgotten, and kept items
  are still found.

Latency: emit -> audit done. ``make_processor`` lets the tests score two negative controls.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from memstack.client import MemoryClient
from memstack.jobs.broker_env import broker_for
from memstack.jobs.eval.forget_oracle import CleanBuild, forgotten_by
from memstack.jobs.measure import Report, Result
from memstack.keystore import FileKeyStore
from memstack.operators.forget import ForgetRequest
from memstack.operators.relations import RelationRegistry
from memstack.pipelines.embedding import shared_encoder
from memstack.pipelines.forgetting import (
    ForgetLedger,
    ForgetProcessor,
    ForgetStores,
    KafkaLineage,
    rebuild_forgetting,
)
from memstack.pipelines.forgetting.duckdb_store import query
from memstack.pipelines.forgetting.keys import rotate_before_request
from memstack.pipelines.forgetting.lance_store import table_of
from memstack.pipelines.forgetting.ledger import parse_request
from memstack.pipelines.log_reader import LogRecord, end_offsets, read_bounded
from memstack.schemas.events import Event, ForgetScope
from memstack.schemas.sealed import parse_record
from memstack.settings import Settings

REGISTRY = RelationRegistry().with_multi(["observed"])
MIX = {"event": 90, "fact": 50, "session": 45, "subject": 10, "tenant": 5}
QUICK_MIX = {"event": 12, "fact": 8, "session": 6, "subject": 2, "tenant": 1}
STOP = frozenset({
    "a", "an", "the", "and", "or", "but", "i", "you", "he", "she", "it", "we", "they", "to",
    "of", "in", "on", "at", "for", "is", "was", "are", "with", "that", "this", "my", "your",
    "so", "just", "what", "have", "has", "had", "be", "do", "did", "not"})


def eval_dir() -> Path:
    env = os.environ.get("MEMSTACK_EVAL_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "eval"


def when(text: str) -> datetime:
    return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def emit_locomo(client: MemoryClient, conv: dict[str, object],
                last: bool | None = None) -> list[Event]:
    """Emit one conversation: every session, or (``last``) only its last one, or (``last``
    False) all but the last."""
    c, tenant, out = conv["conversation"], str(conv["sample_id"]), []
    assert isinstance(c, dict)
    obs = conv.get("observation") or {}
    assert isinstance(obs, dict)
    n = 1
    while f"session_{n}" in c:
        s, at = f"session_{n}", when(c[f"session_{n}_date_time"])
        if last is not None and last != (f"session_{n + 1}" not in c):
            n += 1
            continue
        for turn in c[s]:
            out.append(client.message(s, "user", turn["text"], tenant=tenant,
                                      subject=turn["speaker"], occurred_at=at))
        for speaker, facts in (obs.get(f"{s}_observation") or {}).items():
            for text, *_ in facts:
                out.append(client.fact(s, speaker, "observed", text, tenant=tenant,
                                       occurred_at=at))
            out.append(client.fact(s, speaker, "last_session", s, tenant=tenant,
                                   occurred_at=at))
        n += 1
    return out


def pick_scopes(events: list[Event], mix: dict[str, int], rng: random.Random) -> list[
    tuple[str, ForgetScope]
]:
    out: list[tuple[str, ForgetScope]] = []
    texts = [e for e in events if e.text() and e.kind == "message"]
    facts = [e for e in events if e.kind == "fact_asserted"]
    for e in rng.sample(texts, mix["event"]):
        out.append((e.tenant, ForgetScope(type="event", event_id=e.event_id)))
    for e in rng.sample(facts, mix["fact"]):
        p = e.payload
        obj = getattr(p, "object", None) if rng.random() < 0.7 else None
        out.append((e.tenant, ForgetScope(type="fact", subject=e.subject,
                                          relation=getattr(p, "relation", ""), object=obj)))
    sessions = sorted({(e.tenant, e.session) for e in events})
    for t, s in rng.sample(sessions, mix["session"]):
        out.append((t, ForgetScope(type="session", session=s)))
    subjects = sorted({(e.tenant, e.subject) for e in events if e.subject})
    for t, s in rng.sample(subjects, mix["subject"]):
        out.append((t, ForgetScope(type="subject", subject=s)))
    return out


@dataclass
class Scores:
    removal: list[bool] = field(default_factory=list)
    preservation: list[bool] = field(default_factory=list)
    extraction: list[bool] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    covered: list[set[str]] = field(default_factory=list)
    ledger_only: int = 0
    audit: list[bool] = field(default_factory=list)
    oracle: list[bool] = field(default_factory=list)
    differing: dict[str, int] = field(default_factory=dict)
    generator_errors: int = 0
    kept: set[str] = field(default_factory=set)
    """Items checked for preservation (never forgotten by the end)."""


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


def extraction_ok(stores: ForgetStores, request: ForgetRequest, gone: set[str],
                  texts: list[str], kept: list[Event]) -> bool:
    """Nothing forgotten surfaces from partial or reworded searches; kept items still do."""
    enc, s = shared_encoder(), stores.stores
    for text in texts[:4]:
        words = _words(text)
        partial = " ".join(words[len(words) // 4: max(len(words) // 4 + 1, 3 * len(words) // 4)])
        reworded = " ".join(reversed([w for w in words if w.lower() not in STOP])) or text
        for q in (partial, reworded):
            hits = s.vectors.search_text(q or text, tenant=request.tenant, k=10)
            hits += s.vectors.search_vector(enc.encode([q or text])[0], tenant=request.tenant,
                                            k=10)
            if any(h.row.event_id in gone or h.row.text == text for h in hits):
                return False
    for e in kept[:2]:
        text = e.text() or ""
        hits = s.vectors.search_vector(enc.encode([text])[0], tenant=request.tenant, k=10)
        if not any(h.row.event_id == e.event_id or h.row.text == text for h in hits):
            return False  # a kept item must still be found (or its identical text)
    return True


MakeProcessor = Callable[..., ForgetProcessor]


def run(quick: bool, report: Report, make_processor: MakeProcessor = ForgetProcessor,
        convs: list[dict[str, object]] | None = None,
        mix: dict[str, int] | None = None) -> Result:
    if convs is None:
        data = json.loads((eval_dir() / "locomo" / "locomo10.json").read_text())
        convs = data[:2] if quick else data
    home = Path("out") / "eval-forget" / uuid.uuid4().hex[:8]
    settings = Settings.from_env().with_(home=home.resolve(),
                                         topic_prefix=f"eval-forget-{uuid.uuid4().hex[:8]}")
    with broker_for(settings, report) as s:
        return _run(s, convs, mix or (QUICK_MIX if quick else MIX), report, make_processor)


@dataclass
class Context:
    settings: Settings
    keys: FileKeyStore
    events: list[Event]
    logged: dict[str, datetime]
    early: dict[str, ForgetRequest]
    """The tenant requests, emitted before their tenant's last session."""
    clean: CleanBuild
    scores: Scores = field(default_factory=Scores)
    ledger: ForgetLedger = field(default_factory=ForgetLedger)
    gone: set[str] = field(default_factory=set)
    present: set[str] = field(default_factory=set)
    """What the live stores held before the first request."""


def _emit(settings: Settings, keys: FileKeyStore, convs: list[dict[str, object]],
          tenants: set[str], phase: int) -> list[Event]:
    """Phase 1: every conversation but the last session of the ``tenants``; phase 2: for each
    of them, the tenant request (keys rotated first, as ``memstack forget`` does) and then its
    last session, which is new data the request must keep."""
    with MemoryClient("locomo", "eval", settings=settings, keys=keys) as client:
        events: list[Event] = []
        for conv in convs:
            tenant = str(conv["sample_id"])
            if phase == 1:
                events += emit_locomo(client, conv, False if tenant in tenants else None)
            elif tenant in tenants:
                rotate_before_request(keys, tenant, ForgetScope(type="tenant"))
                client.emit(client.events.forget(ForgetScope(type="tenant"), reason="eval",
                                                 tenant=tenant)).get()
                events += emit_locomo(client, conv, True)
        client.flush()
    return events


def _run(settings: Settings, convs: list[dict[str, object]], mix: dict[str, int],
         report: Report, make_processor: MakeProcessor) -> Result:
    keys, rng = FileKeyStore(settings.keys_dir), random.Random(5)
    tenants = set(rng.sample(sorted(str(c["sample_id"]) for c in convs), mix["tenant"]))
    live, enc = settings.stores_dir / "live", shared_encoder()
    events: list[Event] = []
    for phase in (1, 2):  # the live stores hold phase 1 before the tenant requests are made
        events += _emit(settings, keys, convs, tenants, phase)
        built = rebuild_forgetting(settings.bootstrap, settings.events_topic, live,
                                   ForgetLedger(), keys, encoder=enc, registry=REGISTRY)
        report("phase %d: %d events emitted in all; live stores applied %d in %.1f s", phase,
               len(events), built.applied, built.seconds)
    logged = {_id(r): r.position.log_time for r in read_bounded(settings.bootstrap,
                                                                settings.events_topic)}
    early = {r.tenant: r for rec in read_bounded(settings.bootstrap, settings.forget_topic)
             if (r := parse_request(rec)) is not None}
    clean = CleanBuild(settings.bootstrap, settings.events_topic, events,
                       settings.stores_dir, enc, REGISTRY)
    ctx = Context(settings, keys, events, logged, early, clean)
    lineage = KafkaLineage(settings.bootstrap, settings.events_topic, keys)
    with ForgetStores(live) as stores, MemoryClient("locomo", "eval", settings=settings) as fc:
        clean.remember_live(stores)
        present = set(query(stores.duckdb.index, "SELECT event_id FROM records UNION SELECT "
                            "event_id FROM fact_entries").column(0).to_pylist())
        scopes = pick_scopes([e for e in events if e.event_id in present], mix, rng)
        ctx.present = present
        scopes += [(t, ForgetScope(type="tenant")) for t in sorted(tenants)]
        processor = make_processor(stores, keys=keys, lineage=lineage, encoder=enc,
                                   registry=REGISTRY, outcomes_dir=settings.home / "forget")
        for i, (tenant, scope) in enumerate(scopes):
            _one(ctx, processor, fc, tenant, scope)
            if i % 20 == 0:
                report("request %d/%d: %s, oracle %s", i + 1, len(scopes), scope.type,
                       "equal" if ctx.scores.oracle[-1] else "DIFFERENT")
    return _finish(ctx, live, report)


def _id(record: LogRecord) -> str:
    return parse_record(record.value or b"").event_id


def _request(ctx: Context, client: MemoryClient, tenant: str, scope: ForgetScope) -> (
        ForgetRequest):
    if scope.type == "tenant":
        return ctx.early[tenant]
    start = end_offsets(ctx.settings.bootstrap, ctx.settings.forget_topic)
    rotate_before_request(ctx.keys, tenant, scope)
    client.emit(client.events.forget(scope, reason="eval", tenant=tenant)).get()
    new = [r for rec in read_bounded(ctx.settings.bootstrap, ctx.settings.forget_topic, start)
           if (r := parse_request(rec)) is not None]
    return new[0]


def _one(ctx: Context, processor: ForgetProcessor, client: MemoryClient, tenant: str,
         scope: ForgetScope) -> None:
    sc, t0 = ctx.scores, time.monotonic()
    request = _request(ctx, client, tenant, scope)
    ctx.ledger.add(request)
    gone = forgotten_by(request, ctx.events, ctx.logged)
    ctx.gone |= gone
    safe = [e for e in ctx.events if e.tenant == tenant and e.text() and e.kind == "message"
            and e.event_id not in ctx.gone and e.event_id in ctx.present][:5]
    outcome = processor.apply(request)
    sc.latency.append(time.monotonic() - t0)
    sc.covered.append(gone)
    sc.kept |= {e.event_id for e in safe}
    texts = [t for e in ctx.events if e.event_id in gone and (t := e.text())]
    verdict = ctx.clean.compare(processor.stores, ctx.gone, texts, [e.event_id for e in safe])
    sc.oracle.append(verdict.equal)
    for name in verdict.differing:
        sc.differing[name] = sc.differing.get(name, 0) + 1
    sc.audit.append(outcome.audit.passed)
    sc.removal.append(verdict.equal)
    sc.ledger_only += outcome.audit.notes.get("log_ledger_only", 0) > 0
    if not safe:
        sc.generator_errors += 1  # nothing to preserve: the generator's fault, never a pass
    sc.preservation.append(verdict.preserved)  # as in the clean build, not merely unchanged
    sc.extraction.append(extraction_ok(processor.stores, request, gone, texts, safe))


def _finish(ctx: Context, live: Path, report: Report) -> Result:
    settings, sc = ctx.settings, ctx.scores
    replay = settings.stores_dir / "replay"
    rebuilt = rebuild_forgetting(settings.bootstrap, settings.events_topic, replay, ctx.ledger,
                                 ctx.keys, encoder=shared_encoder(), registry=REGISTRY)
    report("replay through the ledger: %d applied, %d forgotten, %d shredded in %.1f s",
           rebuilt.applied, rebuilt.forgotten, rebuilt.shredded, rebuilt.seconds)
    with ForgetStores(replay) as r, ForgetStores(live) as lv:
        ids = query(r.duckdb.index, "SELECT event_id FROM records UNION SELECT event_id FROM "
                    "fact_entries UNION SELECT source_event_id FROM fact_versions")
        present = set(ids.column(0).to_pylist())
        present |= {m.memory_id for m in r.stores.vectors.get([e.event_id for e in ctx.events])}
        kept_back = sc.kept - ctx.gone <= present
        replay_ok = [not (gone & present) and kept_back for gone in sc.covered]
        rows_equal = _rows(r) == _rows(lv)
        hr = {k: v for k, v in r.stores.content_hashes().items() if k != "offsets"}
        hl = {k: v for k, v in lv.stores.content_hashes().items() if k != "offsets"}
    report("replay vs live, differing tables: %s; oracle differences: %s",
           sorted(k for k in hl if hr.get(k) != hl[k]), sc.differing)
    passed = [all(x) for x in zip(sc.removal, sc.preservation, replay_ok, sc.extraction,
                                  strict=True)]
    lat = np.asarray(sc.latency)
    figures = {
        "requests": float(len(passed)), "pass_rate": _rate(passed),
        "removal_rate": _rate(sc.removal), "oracle_equal_rate": _rate(sc.oracle),
        "audit_pass_rate": _rate(sc.audit),
        "preservation_rate": _rate(sc.preservation), "replay_rate": _rate(replay_ok),
        "extraction_rate": _rate(sc.extraction),
        "generator_errors": float(sc.generator_errors),
        "latency_p50_s": float(np.percentile(lat, 50)),
        "latency_p99_s": float(np.percentile(lat, 99)),
        "replay_equals_live": float(hr == hl),
        "replay_equals_live_rows": float(rows_equal and all(
            hr[k] == hl[k] for k in hl if k != "memories")),
        "ledger_only_log_requests": float(sc.ledger_only),
        "events": float(len(ctx.events)),
    }
    report("figures: %s", figures)
    return Result("forget", figures)


def _rows(stores: ForgetStores) -> list[tuple[str, str, str]]:
    """The memory rows without their embeddings (ids, text, tt), sorted."""
    t = table_of(stores.lance.index).to_arrow().select(["memory_id", "text", "tt_from"])
    return sorted(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))


def _rate(flags: list[bool]) -> float:
    return float(sum(flags)) / len(flags) if flags else 0.0
