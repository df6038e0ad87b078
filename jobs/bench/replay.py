"""``memstack bench replay``: replay throughput against the embedding model's own speed.

On this CPU machine the embedding model is the physical limit, so ``ratio`` = replay events/s ÷
bare embedding events/s of the same texts with the same model in the same run. Both sides get
the model at its best here:

- embed only: the texts of the log, in log order, ``EMBED_CALL`` texts per model call (the model
  sorts a call by length, batch 64), measured two ways: one process with 2 torch threads, and
  two processes with 1 thread each over the two halves of the log (the replay's shape at
  parallelism 2); ``embed_only_events_per_s`` is the faster of the two;
- replay: ``memstack replay`` at parallelism 1 and 2, events ÷ seconds from the moment every
  worker had its model loaded to the writer's last commit (JVM, worker and model start-up are
  reported apart as ``replay_startup_s``; ``replay_wall_events_per_s`` includes them);
- live: the live worker (Faust, batches of 64, session state on) catching up on the same log,
  from its partition assignment to its last commit.

``verify_equal`` is 1 when the one-process rebuild, both replays and the live worker's stores
have equal content hashes. Every text in the log is distinct (:func:`conversation`), so no cache
(not even the live worker's, which exists for the session state) can skip the model.
"""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memstack.builders import Defaults, EventBuilder
from memstack.client import MemoryClient
from memstack.jobs.bench.pipeline import Timed
from memstack.jobs.broker_env import broker_for
from memstack.jobs.measure import Report, Result
from memstack.pipelines.log_reader import read_bounded
from memstack.schemas.events import Event, parse_event
from memstack.settings import Settings

EMBED_CALL = 1024
"""Texts per model call: the replay's own (``ReplaySpec.embed_batch``)."""


NAMES = ("Ana", "Bruno", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun")
CITIES = ("Lisbon", "Porto", "Braga", "Faro", "Coimbra", "Aveiro", "Evora", "Leiria")
JOBS = ("nurse", "teacher", "welder", "chef", "pilot", "architect", "baker", "lawyer")
STREETS = ("Rua Formosa", "Rua do Bonjardim", "Rua de Santa Catarina", "Avenida da Liberdade")


def conversation(builder: EventBuilder, i: int) -> list[Event]:
    """Ten events shaped like the sample conversation, every text different from every other
    session's (so no cache anywhere, not even the live worker's, can skip the model)."""
    t0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC) + timedelta(minutes=i)
    name, job = NAMES[i % len(NAMES)], JOBS[(i // 3) % len(JOBS)]
    home, dest = CITIES[i % len(CITIES)], CITIES[(i + 3) % len(CITIES)]
    street, rent, subject, session = STREETS[i % len(STREETS)], 700 + i, f"user:{i}", f"s{i}"

    def at(minutes: int) -> datetime:
        return t0 + timedelta(minutes=minutes)

    return [
        builder.message(session, "user", f"Hi, I'm {name} (#{i}). I live in {home} and work "
                        f"as a {job}.", occurred_at=at(0), subject=subject, authority="user"),
        builder.fact(session, subject, "lives_in", home, occurred_at=at(0)),
        builder.fact(session, subject, "works_as", f"{job} {i}", occurred_at=at(0)),
        builder.message(session, "assistant", f"Nice to meet you, {name}! How can I help "
                        f"today with case {i}?", occurred_at=at(1)),
        builder.message(session, "user", f"I'm moving to {dest} on day {i % 28 + 1}. Find me a "
                        f"flat under {rent} EUR near {street}?", occurred_at=at(2),
                        subject=subject, authority="user"),
        builder.tool_call(session, "flat_search", f"call-{i}",
                          {"city": dest, "near": street, "max_rent_eur": rent},
                          occurred_at=at(3)),
        builder.tool_result(session, "flat_search", f"call-{i}",
                            f"{i % 5 + 1} flats found: {street} {i % 90 + 1} ({rent - 50} EUR), "
                            f"{STREETS[(i + 1) % len(STREETS)]} {i % 40 + 2} ({rent} EUR)",
                            occurred_at=at(4)),
        builder.fact(session, subject, "lives_in", dest, occurred_at=at(5)),
        builder.observation(session, f"{name} prefers quiet streets and has {i % 4} cats "
                            f"(noted in session {i}).", occurred_at=at(6), subject=subject),
        builder.note(session, f"Follow up on the {street} {i % 90 + 1} viewing on day "
                     f"{i % 28 + 2}.", occurred_at=at(7), subject=subject),
    ]


def _emit(settings: Settings, events: int) -> int:
    builder = EventBuilder(Defaults("bench", "helper"))
    batch: list[Event | dict[str, Any]] = []
    for i in range(events // 10):
        batch += conversation(builder, i)
    with MemoryClient("bench", "helper", settings=settings) as client:
        pending = client.emit_many(batch)
        client.flush()
        for p in pending:
            p.get()
    return len(batch)


def _log_texts(settings: Settings) -> tuple[list[str], int]:
    records = list(read_bounded(settings.bootstrap, settings.events_topic))
    return [t for r in records if r.value and (t := parse_event(r.value).text())], len(records)


def _embed_seconds(texts: list[str], threads: int, start: Any = None) -> float:
    """Seconds the bare model takes over ``texts`` (warmed up; after ``start`` when given)."""
    from memstack.pipelines.embedding import MiniLMEncoder

    encoder = MiniLMEncoder(threads=threads).load()
    encoder.encode(texts[:64])  # warm-up
    if start is not None:
        start.wait()
    began = time.perf_counter()
    for i in range(0, len(texts), EMBED_CALL):
        encoder.encode(texts[i:i + EMBED_CALL])
    return time.perf_counter() - began


def _embed_half(args: tuple[list[str], Any]) -> float:
    return _embed_seconds(args[0], 1, args[1])


def _embed_only(settings: Settings, report: Report) -> tuple[float, float]:
    """Events/s of the bare model: one process × 2 threads, two processes × 1 thread."""
    texts, events = _log_texts(settings)
    one = events / _embed_seconds(texts, 2)
    report("embed only, 1 process x 2 threads: %d texts of %d events, %.0f ev/s "
           "(%d per call)", len(texts), events, one, EMBED_CALL)
    ctx = multiprocessing.get_context("spawn")
    half = len(texts) // 2
    with ctx.Manager() as manager, ctx.Pool(2) as pool:
        start = manager.Barrier(2)
        seconds = pool.map(_embed_half, [(texts[:half], start), (texts[half:], start)])
    two = events / max(seconds)
    report("embed only, 2 processes x 1 thread: %.0f ev/s (halves took %.1f s, %.1f s)",
           two, *seconds)
    return one, two


def _replay(settings: Settings, into: Path, parallelism: int,
            report: Report) -> tuple[float, float, float]:
    """(events/s while processing, start-up seconds, events/s over the whole job)."""
    from memstack.pipelines.replay.bounds import Earliest
    from memstack.pipelines.replay.job import ReplaySpec, run_replay

    spec = ReplaySpec(into=into, start=Earliest(), parallelism=parallelism,
                      work_dir=into.parent / "flink")
    result = run_replay(spec, settings)
    p = result.progress
    assert p is not None
    rate = p.applied / p.processing_s if p.processing_s > 0 else 0.0
    startup = result.job_seconds - p.processing_s
    report("replay p=%d: %d events, %.0f ev/s while processing, %.1f s start-up, %.1f s job",
           parallelism, p.applied, rate, startup, result.job_seconds)
    return rate, startup, p.applied / result.job_seconds


@dataclass
class Clocked(Timed):
    """The pipeline bench's commit-timing wrapper, plus when the worker was assigned."""

    assigned_at: float = 0.0

    def applied_offsets(self) -> dict[int, int]:
        if self.assigned_at == 0.0:
            self.assigned_at = time.time()
        return super().applied_offsets()


def _live(settings: Settings, into: Path, report: Report) -> float:
    """Events/s of the live worker catching up on the log, assignment to last commit."""
    from memstack.jobs.run import open_projector
    from memstack.pipelines.faust_app import build_live_app, run_worker
    from memstack.pipelines.live import LiveConfig
    from memstack.pipelines.log_reader import end_offsets

    projector, stores = open_projector(into, settings, 2, 64)
    encoder = projector.encoder  # type: ignore[attr-defined]  # the worker's CachingEncoder
    encoder.encode(["warm the model up before the clock starts"])
    timed = Clocked(projector)
    live = build_live_app(settings, LiveConfig(batch_max=64, within_s=0.1), timed)
    live.stop_at = end_offsets(settings.bootstrap, settings.events_topic)
    try:
        code = run_worker(live)
    finally:
        stores.close()
    if code != 0 or not timed.visible:
        raise RuntimeError(f"the live worker did not catch up (exit {code})")
    began = timed.assigned_at or min(timed.visible.values())
    seconds = max(timed.visible.values()) - began
    rate = len(timed.visible) / seconds
    report("live worker: %d events in %.1f s after assignment, %.0f ev/s", len(timed.visible),
           seconds, rate)
    return rate


def run(quick: bool, report: Report) -> Result:
    from memstack.pipelines.rebuild import rebuild
    from memstack.pipelines.replay.verify import compare

    base = Settings.from_env()
    prefix = f"bench-replay-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="memstack-bench-replay-"))
    with broker_for(base.with_(topic_prefix=prefix, home=work / "home")) as settings:
        events = _emit(settings, 600 if quick else 6000)
        report("emitted %d events to %s", events, settings.events_topic)
        embed_one, embed_two = _embed_only(settings, report)
        embed_rate = max(embed_one, embed_two)
        began = time.perf_counter()
        rebuild(settings.bootstrap, settings.events_topic, work / "rebuild")
        rebuild_rate = events / (time.perf_counter() - began)
        report("simple rebuild (one process, batch 64): %.0f ev/s", rebuild_rate)
        rate1, startup1, wall1 = _replay(settings, work / "replay-p1", 1, report)
        rate2, startup2, wall2 = _replay(settings, work / "replay-p2", 2, report)
        live_rate = _live(settings, work / "live", report)
        others = ("replay-p1", "replay-p2", "live")
        diffs = {name: compare(work / "rebuild", work / name) for name in others}
        for name, diff in diffs.items():
            report("verify rebuild vs %s: %s", name, "equal" if diff.equal else diff)
        equal = all(d.equal for d in diffs.values())
    shutil.rmtree(work, ignore_errors=True)
    best, startup, wall = (rate1, startup1, wall1) if rate1 >= rate2 else \
        (rate2, startup2, wall2)
    return Result("replay", ratio=best / embed_rate, figures={
        "replay_events_per_s": best, "replay_p1_events_per_s": rate1,
        "replay_p2_events_per_s": rate2, "replay_wall_events_per_s": wall,
        "replay_startup_s": startup, "embed_only_events_per_s": embed_rate,
        "embed_only_1x2_events_per_s": embed_one, "embed_only_2x1_events_per_s": embed_two,
        "ratio_p1": rate1 / embed_rate, "ratio_p2": rate2 / embed_rate,
        "rebuild_events_per_s": rebuild_rate, "live_events_per_s": live_rate,
        "replay_vs_live": best / live_rate, "verify_equal": 1.0 if equal else 0.0,
        "events": float(events),
    })
