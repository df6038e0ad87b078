"""``memstack eval forget``: forget requests of every scope over the LoCoMo conversations.

Each conversation is a tenant, each session a session, each speaker a subject; turns are
sealed messages, per-session observations are multi-valued facts and ``last_session`` a
single-valued one. Requests (event, fact, session, subject, tenant) are emitted to the real
broker and applied to real DuckDB/LanceDB stores with the real model. Per request: removal (the
audit finds no residual), preservation (control memories outside every scope unchanged),
replay (gone after a rebuild from offset 0 through the ledger), extraction (partial-text and
reworded searches surface nothing of it). Latency: emit -> audit passes.
"""

from __future__ import annotations

import json
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.jobs.broker_env import broker_for
from memstack.jobs.eval.locomo_data import eval_dir
from memstack.jobs.measure import Report, Result
from memstack.operators.forget import ForgetRequest, Subject
from memstack.operators.log import LogPosition
from memstack.operators.relations import RelationRegistry
from memstack.pipelines.embedding import shared_encoder
from memstack.pipelines.forgetting import (
    ForgetLedger,
    ForgetProcessor,
    ForgetStores,
    KafkaLineage,
    rebuild_forgetting,
)
from memstack.pipelines.forgetting.keys import rotate_before_request
from memstack.pipelines.forgetting.ledger import parse_request
from memstack.pipelines.log_reader import end_offsets, read_bounded
from memstack.schemas.events import Event, ForgetScope

REGISTRY = RelationRegistry().with_multi(["observed"])
MIX = {"event": 90, "fact": 50, "session": 45, "subject": 10, "tenant": 5}
QUICK_MIX = {"event": 12, "fact": 8, "session": 6, "subject": 2, "tenant": 1}
STOP = frozenset({
    "a", "an", "the", "and", "or", "but", "i", "you", "he", "she", "it", "we", "they", "to",
    "of", "in", "on", "at", "for", "is", "was", "are", "with", "that", "this", "my", "your",
    "so", "just", "what", "have", "has", "had", "be", "do", "did", "not"})


def when(text: str) -> datetime:
    return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def emit_locomo(client: MemoryClient, conv: dict[str, object]) -> list[Event]:
    c, tenant, out = conv["conversation"], str(conv["sample_id"]), []
    assert isinstance(c, dict)
    obs = conv.get("observation") or {}
    assert isinstance(obs, dict)
    n = 1
    while f"session_{n}" in c:
        s, at = f"session_{n}", when(c[f"session_{n}_date_time"])
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
    for t in rng.sample(sorted({e.tenant for e in events}), mix["tenant"]):
        out.append((t, ForgetScope(type="tenant")))
    return out


@dataclass
class Scores:
    removal: list[bool] = field(default_factory=list)
    preservation: list[bool] = field(default_factory=list)
    extraction: list[bool] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    covered: list[set[str]] = field(default_factory=list)
    ledger_only: int = 0
    checkpoint_clean: list[float] = field(default_factory=list)


def covers(request: ForgetRequest, e: Event) -> bool:
    return request.covers(Subject.of_event(e), None)


def snapshot(stores: ForgetStores, ids: list[str]) -> object:
    s = stores.stores
    rows = [s.events.record(i) for i in ids]
    mem = s.vectors.get(ids)
    vecs = s.vectors.vectors_of([m.memory_id for m in mem]) if mem else np.zeros(0)
    return rows, mem, np.round(vecs, 4).tolist()


def extraction_ok(stores: ForgetStores, request: ForgetRequest, gone: set[str],
                  texts: list[str]) -> bool:
    enc, s = shared_encoder(), stores.stores
    for text in texts[:4]:
        words = re.findall(r"\w+", text)
        partial = " ".join(words[len(words) // 4: max(len(words) // 4 + 1, 3 * len(words) // 4)])
        reworded = " ".join(reversed([w for w in words if w.lower() not in STOP])) or text
        for q in (partial, reworded):
            hits = s.vectors.search_text(q or text, tenant=request.tenant, k=10)
            hits += s.vectors.search_vector(enc.encode([q or text])[0], tenant=request.tenant,
                                            k=10)
            if any(h.row.event_id in gone or h.row.text == text for h in hits):
                return False
    return True


def run(quick: bool, report: Report) -> Result:
    data = json.loads((eval_dir() / "locomo" / "locomo10.json").read_text())
    convs = data[:2] if quick else data
    home = Path("out") / "eval-forget" / uuid.uuid4().hex[:8]
    settings = Settings.from_env().with_(home=home.resolve(),
                                         topic_prefix=f"eval-forget-{uuid.uuid4().hex[:8]}")
    with broker_for(settings, report) as s:
        return _run(s, convs, QUICK_MIX if quick else MIX, report)


def _run(settings: Settings, convs: list[dict[str, object]], mix: dict[str, int],
         report: Report) -> Result:
    keys = FileKeyStore(settings.keys_dir)
    with MemoryClient("locomo", "eval", settings=settings, keys=keys) as client:
        events = [e for conv in convs for e in emit_locomo(client, conv)]
        client.flush()
    report("emitted %d events of %d conversations", len(events), len(convs))
    live, enc = settings.stores_dir / "live", shared_encoder()
    built = rebuild_forgetting(settings.bootstrap, settings.events_topic, live, ForgetLedger(),
                               keys, encoder=enc, registry=REGISTRY)
    report("live stores built: %d applied in %.1f s", built.applied, built.seconds)
    scopes = pick_scopes(events, mix, random.Random(5))
    scores, ledger = Scores(), ForgetLedger()
    lineage = KafkaLineage(settings.bootstrap, settings.events_topic, keys)
    with ForgetStores(live) as stores, MemoryClient("locomo", "eval", settings=settings) as fc:
        processor = ForgetProcessor(stores, keys=keys, lineage=lineage, encoder=enc,
                                    registry=REGISTRY, outcomes_dir=settings.home / "forget")
        for i, (tenant, scope) in enumerate(scopes):
            _one(settings, processor, fc, keys, tenant, scope, events, scopes, ledger, scores)
            if i % 20 == 0:
                report("request %d/%d: %s", i + 1, len(scopes), scope.type)
    return _finish(settings, keys, events, ledger, scores, live, report)


def _one(settings: Settings, processor: ForgetProcessor, client: MemoryClient,
         keys: FileKeyStore, tenant: str, scope: ForgetScope, events: list[Event],
         scopes: list[tuple[str, ForgetScope]], ledger: ForgetLedger, sc: Scores) -> None:
    pending = [ForgetRequest("x", t, s, _far()) for t, s in scopes]
    safe = [e.event_id for e in events if e.tenant == tenant and e.text()
            and not any(covers(r, e) for r in pending)][:5]
    before = snapshot(processor.stores, safe)
    start = end_offsets(settings.bootstrap, settings.forget_topic)
    t0 = time.monotonic()
    rotate_before_request(keys, tenant, scope)
    client.emit(client.events.forget(scope, reason="eval", tenant=tenant)).get()
    new = [r for rec in read_bounded(settings.bootstrap, settings.forget_topic, start)
           if (r := parse_request(rec)) is not None]
    for r in new:
        ledger.add(r)
    outcome = processor.apply(new[0])
    sc.latency.append(time.monotonic() - t0)
    request = new[0]
    gone = {e.event_id for e in events if covers(request, e)}
    sc.covered.append(gone)
    sc.removal.append(outcome.audit.passed)
    sc.ledger_only += outcome.audit.notes.get("log_ledger_only", 0) > 0
    duck = next(r for r in outcome.reports if r.store == "duckdb")
    sc.checkpoint_clean.append(duck.physical.get("checkpoint_clean", 0.0))
    sc.preservation.append(snapshot(processor.stores, safe) == before)
    texts = [t for e in events if e.event_id in gone and (t := e.text())]
    sc.extraction.append(extraction_ok(processor.stores, request, gone, texts))


def _far() -> LogPosition:
    return LogPosition(datetime.max.replace(tzinfo=UTC), 0, 0)


def _finish(settings: Settings, keys: FileKeyStore, events: list[Event],
            ledger: ForgetLedger, sc: Scores, live: Path, report: Report) -> Result:
    replay = settings.stores_dir / "replay"
    rebuilt = rebuild_forgetting(settings.bootstrap, settings.events_topic, replay, ledger,
                                 keys, encoder=shared_encoder(), registry=REGISTRY)
    report("replay through the ledger: %d applied, %d forgotten, %d shredded in %.1f s",
           rebuilt.applied, rebuilt.forgotten, rebuilt.shredded, rebuilt.seconds)
    with ForgetStores(replay) as r, ForgetStores(live) as lv:
        ids = r.duckdb.index.query("SELECT event_id FROM records UNION SELECT event_id FROM "
                    "fact_entries UNION SELECT source_event_id FROM fact_versions")
        present = set(ids.column(0).to_pylist())
        present |= {m.memory_id for m in r.stores.vectors.get([e.event_id for e in events])}
        replay_ok = [not (gone & present) for gone in sc.covered]
        rows_equal = _rows(r) == _rows(lv)
        hr = {k: v for k, v in r.stores.content_hashes().items() if k != "offsets"}
        hl = {k: v for k, v in lv.stores.content_hashes().items() if k != "offsets"}
    report("replay vs live, differing tables: %s", sorted(k for k in hl if hr.get(k) != hl[k]))
    n = len(sc.removal)
    passed = [all(x) for x in zip(sc.removal, sc.preservation, replay_ok, sc.extraction,
                                  strict=True)]
    lat = np.asarray(sc.latency)
    figures = {
        "requests": float(n), "pass_rate": _rate(passed), "removal_rate": _rate(sc.removal),
        "preservation_rate": _rate(sc.preservation), "replay_rate": _rate(replay_ok),
        "extraction_rate": _rate(sc.extraction),
        "latency_p50_s": float(np.percentile(lat, 50)),
        "latency_p99_s": float(np.percentile(lat, 99)),
        "replay_equals_live": float(hr == hl),
        "replay_equals_live_rows": float(rows_equal and all(
            hr[k] == hl[k] for k in hl if k != "memories")),
        "ledger_only_log_requests": float(sc.ledger_only),
        "duckdb_checkpoint_alone_clean_rate": float(np.mean(sc.checkpoint_clean)),
        "events": float(len(events)),
    }
    report("figures: %s", figures)
    return Result("forget", figures)


def _rows(stores: ForgetStores) -> list[tuple[str, str, str]]:
    """The memory rows without their embeddings (ids, text, tt), sorted."""
    t = stores.lance.index.lance_table.to_arrow().select(["memory_id", "text", "tt_from"])
    return sorted(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))


def _rate(flags: list[bool]) -> float:
    return float(sum(flags)) / len(flags) if flags else 0.0
