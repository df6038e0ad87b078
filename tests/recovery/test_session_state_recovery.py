"""Crash and resume of the durable session state, against the real broker and changelog topic.

A worker process applies a stream of logged events in batches (real MiniLM, real arena, snapshots
to a real compacted changelog topic through :class:`KafkaSink`) and is killed with SIGKILL
mid-stream. A restarted updater recovers every session from the changelog's latest snapshots and
is fed the whole stream again (as the live pipeline redelivers from the stores' offsets); the
offset marks in the snapshots skip what was already applied. Its states must equal a clean run's.

This tests the module's recovery path directly (its own producer, no Faust worker): the Faust
app is wired by the lead with the lines in the report / docs/session-state.md.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import torch

from memstack.operators.log import LoggedEvent, LogPosition
from memstack.pipelines.embedding import shared_encoder
from memstack.pipelines.session_state.table import (
    KafkaSink,
    SessionStateUpdater,
    ensure_changelog_topic,
    latest_snapshots,
)
from memstack.schemas.events import Event

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SESSIONS = 4
PARTITIONS = 2
EVENTS = 240
BATCH = 12


def stream() -> list[LoggedEvent]:
    """Deterministic events of 4 sessions over 2 partitions: messages and facts."""
    out: list[LoggedEvent] = []
    offsets = [0] * PARTITIONS
    for i in range(EVENTS):
        s = i % SESSIONS
        partition = s % PARTITIONS
        fact = i % 5 == 0
        event = Event.model_validate({
            "event_id": f"01900000-{i:04x}-7000-8000-{i:012x}", "tenant": "acme", "agent": "a",
            "session": f"s{s}", "subject": f"user:u{i % 3}" if fact else None,
            "kind": "fact_asserted" if fact else "message", "occurred_at": T0,
            "provenance": {"source": "test"},
            "payload": ({"relation": "lives_in", "object": f"city {i}"} if fact
                        else {"role": "user", "text": f"turn {i}: tea with {i % 7} sugars"})})
        pos = LogPosition(T0 + timedelta(seconds=30 * i), partition, offsets[partition])
        offsets[partition] += 1
        out.append(LoggedEvent(event, pos))
    return out


def run_stream(updater: SessionStateUpdater, pause_s: float = 0.0, say: bool = False) -> None:
    events = stream()
    for start in range(0, len(events), BATCH):
        asyncio.run(updater.apply(events[start:start + BATCH]))
        if say:
            print(f"applied {start + BATCH}", flush=True)
        time.sleep(pause_s)


def states(updater: SessionStateUpdater) -> dict[str, torch.Tensor]:
    out = {}
    for s in range(SESSIONS):
        state = updater.state(f"acme/s{s}")
        assert state is not None
        out[f"s{s}"] = state.sums_at()
    return out


@pytest.mark.slow
def test_state_after_kill_and_restart_equals_a_clean_run(kafka: object) -> None:
    bootstrap = kafka.bootstrap  # type: ignore[attr-defined]  # the conftest fixture
    crash_topic, clean_topic = (f"t-state-{uuid.uuid4().hex[:8]}-{n}" for n in ("crash", "clean"))
    for topic in (crash_topic, clean_topic):
        ensure_changelog_topic(bootstrap, topic, PARTITIONS)
    worker = subprocess.Popen([sys.executable, __file__, bootstrap, crash_topic],
                              stdout=subprocess.PIPE, text=True)
    assert worker.stdout is not None
    for _ in range(4):  # a few batches acknowledged, the next one under way
        assert worker.stdout.readline().startswith("applied")
    time.sleep(0.1)
    worker.kill()  # SIGKILL, mid-stream
    worker.wait(timeout=30)
    survived = latest_snapshots(bootstrap, crash_topic)
    assert survived, "the worker wrote nothing before it was killed; raise the sleep"
    encoder = shared_encoder()
    clean_sink = KafkaSink(bootstrap, clean_topic)
    clean = SessionStateUpdater(clean_sink, clean_sink, encoder)
    run_stream(clean)
    sink = KafkaSink(bootstrap, crash_topic, snapshots=survived)
    restarted = SessionStateUpdater(sink, sink, encoder)
    run_stream(restarted)
    marks = {k: restarted.state(k).marks for k in survived}  # type: ignore[union-attr]
    assert any(marks.values())
    got, want = states(restarted), states(clean)
    for key in want:
        rel = float((got[key] - want[key]).norm() / want[key].norm())
        assert rel <= 1e-12, f"{key}: relative difference {rel:.2e}"
    # and the changelog alone (a cold reader) holds the same final states
    cold = KafkaSink(bootstrap, crash_topic, snapshots=latest_snapshots(bootstrap, crash_topic))
    again = SessionStateUpdater(cold, cold, encoder)
    for key, tensor in states(again).items():
        assert torch.equal(tensor, got[key])
    for s in (sink, clean_sink, cold):
        s.close()


def main(bootstrap: str, topic: str) -> None:
    """The worker: apply the stream slowly until killed."""
    sink = KafkaSink(bootstrap, topic)
    updater = SessionStateUpdater(sink, sink, shared_encoder().load())
    run_stream(updater, pause_s=0.05, say=True)
    print("done", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(sys.argv[1], sys.argv[2])
