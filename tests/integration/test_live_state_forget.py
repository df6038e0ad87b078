"""Forgetting events, a subject and a fact pattern in the live worker's session state.

A conversation of two sessions goes through the live worker (Faust, real broker, MiniLM); then
an event, a subject and a fact-pattern request are logged and a second worker run applies them.
The state is not dropped (each session keeps other items) but has the forgotten events' terms
subtracted: the changelog's latest snapshots must equal the states of a clean run of the same
updater over the same log minus the forgotten events: to float rounding where both embed a text
to the same vector (turns: the forget subtracts the stored vectors), to MiniLM's batch noise
elsewhere (see ``NOISE``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from memstack.client import MemoryClient
from memstack.foundation.settings import Settings
from memstack.jobs.run import spawn_worker
from memstack.operators.log import LoggedEvent
from memstack.operators.session_state.codec import restore_sums
from memstack.operators.session_state.keys import Head
from memstack.pipelines.embedding import CachingEncoder, Encoder, shared_encoder
from memstack.pipelines.faust_app import group_id
from memstack.pipelines.forgetting.ledger import parse_request
from memstack.pipelines.forgetting.session_state_store import divergence
from memstack.pipelines.log_reader import read_bounded
from memstack.pipelines.session_state.table import (
    SessionStateUpdater,
    changelog_topic,
    latest_snapshots,
)
from memstack.pipelines.stores.bundle import Stores
from tests.forget.reference import covered_ids
from tests.integration.test_session_state_live import MemorySink
from tests.logged import open_logged

EXACT = 1e-12
"""Relative, per head, where both sides embed each text to the same vector: the TURNS head
(the clean run is given the worker's stored turn vectors, and the forget subtracted those)."""
NOISE = 1e-5
"""Relative, per head, against a clean run that embeds everything afresh: MiniLM's vectors
depend on the batch a text is in (≤ 1e-6 per vector measured), and fact terms are re-embedded
at removal (no store keeps their vectors). A term left behind would differ by ~1/n of its head
(n items: 0.2 or more here)."""


def run_worker(settings: Settings, stores: Path, log: Path) -> None:
    worker = spawn_worker(settings, stores, "--until-caught-up", "--within", "0.1", log_path=log)
    assert worker.wait(timeout=240) == 0, log.read_text()[-3000:]


def converse(settings: Settings) -> dict[str, str]:
    """Two sessions of turns, notes and facts; returns the ids the test forgets by."""
    with MemoryClient("acme", "bot", settings=settings) as c:
        for i, text in enumerate(["I water the basil every two days",
                                  "The balcony gets sun in the afternoon",
                                  "My locker code is 7731 at the Graca gym",
                                  "Remind me to repot the lemon tree in spring"]):
            c.message("s-a", "user" if i % 2 == 0 else "assistant", text)
        c.fact("s-a", "user:ana", "lives_in", "Lisbon")
        c.note("s-a", "Ana is allergic to penicillin", subject="user:ana")
        c.fact("s-a", "user:bob", "likes", "green tea")
        c.message("s-b", "user", "We planned the regatta in Cascais for June")
        c.fact("s-b", "user:ana", "works_at", "a bakery in Alfama")
        c.fact("s-b", "user:bob", "lives_in", "Faro")
        c.message("s-b", "assistant", "Bob will bring the sailing charts")
        last = c.message("s-b", "user", "The boat needs new sails before the race")
        locker = c.events.message("s-a", "user", "My locker code is 9902 at the Campo gym")
        c.emit(locker)
        c.message("s-a", "assistant", "Noted, the locker code is safe with me")
        c.flush()
    return {"locker": locker.event_id, "last": last.event_id}


def logged_events(settings: Settings) -> list[LoggedEvent]:
    return [LoggedEvent(open_logged(settings, r.value), r.position)
            for r in read_bounded(settings.bootstrap, settings.events_topic)]


def clean_run(events: list[LoggedEvent], encoder: Encoder) -> SessionStateUpdater:
    sink = MemorySink()
    clean = SessionStateUpdater(sink, sink, encoder)
    asyncio.run(clean.apply(events))
    return clean


def worker_vectors(stores: Path) -> CachingEncoder:
    """MiniLM, except that the surviving turns embed to the vectors the worker stored."""
    encoder = CachingEncoder(shared_encoder())
    with Stores.open(stores, read_only=True) as opened:
        rows = [r for r in opened.events.records("acme") if r.text]
        encoder.remember([r.text or "" for r in rows],
                         opened.vectors.vectors_of([r.event_id for r in rows]))
    return encoder


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_event_subject_and_fact_forgets_subtract_exactly(topics: Settings,
                                                         tmp_path: Path) -> None:
    stores = tmp_path / "stores"
    ids = converse(topics)
    run_worker(topics, stores, tmp_path / "w1.log")
    changelog = changelog_topic(group_id(topics))
    before = {k: restore_sums(v) for k, v in latest_snapshots(topics.bootstrap,
                                                              changelog).items()}
    assert before["acme/s-a"].counts == (2, 7) and before["acme/s-b"].counts == (2, 3)
    events = logged_events(topics)  # read before the forgets shred the sealed payloads

    with MemoryClient("acme", "bot", settings=topics) as c:
        c.forget({"type": "event", "event_id": ids["locker"]})
        c.forget({"type": "event", "event_id": ids["last"]})  # s-b's latest item
        c.forget({"type": "subject", "subject": "user:ana"})
        c.forget({"type": "fact", "subject": "user:bob", "relation": "lives_in"})
        c.flush()
    run_worker(topics, stores, tmp_path / "w2.log")

    requests = [r for rec in read_bounded(topics.bootstrap, topics.forget_topic)
                if (r := parse_request(rec)) is not None]
    gone = frozenset().union(*(covered_ids(r, events) for r in requests))
    assert len(gone) == 6  # locker, last; ana's two facts and note; bob's lives_in
    kept = [e for e in events if e.event.event_id not in gone]
    fresh, pinned = clean_run(kept, shared_encoder()), clean_run(kept, worker_vectors(stores))

    values = [r.value for r in read_bounded(topics.bootstrap, changelog)]
    assert None not in values  # partial removals: no session was dropped
    live = {k: restore_sums(v) for k, v in latest_snapshots(topics.bootstrap,
                                                            changelog).items()}
    assert live["acme/s-a"].counts == (1, 5) and live["acme/s-b"].counts == (0, 2)
    for key in ("acme/s-a", "acme/s-b"):
        want, same_vectors = fresh.state(key), pinned.state(key)
        assert want is not None and same_vectors is not None
        assert live[key].last_time == want.last_time, key  # s-b's read time moved back
        exact = divergence(live[key], same_vectors, [Head.TURNS])
        error = divergence(live[key], want)
        print(f"{key}: turns vs a clean run with the same vectors {exact:.1e}, "
              f"all heads vs a fresh clean run {error:.1e}")
        assert exact <= EXACT and error <= NOISE, (key, exact, error)

    for request in requests:  # every request's audit saw no term left in the state
        outcome = json.loads((topics.home / "forget" / f"{request.request_id}.json").read_text())
        assert outcome["audit"]["session_state"].get("terms", 0) == 0, outcome
        assert outcome["stores"]["session_state"]["deleted"]["terms"] >= 1, outcome
