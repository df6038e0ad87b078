"""The session-state updater: idempotent batches, exact forget, session drop with a tombstone.

Pure logic of the updater (no broker): an in-memory changelog sink and a deterministic hashing
encoder stand in for Kafka and MiniLM; the broker path is in tests/recovery. The state store
runs the shared forget contract suite in tests/forget/test_session_state_forget.py.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt

from memstack.operators.log import LoggedEvent, LogPosition
from memstack.pipelines.session_state.table import SessionStateUpdater
from memstack.schemas.events import Event

T0 = datetime(2026, 3, 1, tzinfo=UTC)


class HashEncoder:
    """Deterministic unit vectors from text hashes (a fake for logic tests only)."""

    name = "hash"
    dim = 384

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.stack([np.random.default_rng(int.from_bytes(
            hashlib.sha256(t.encode()).digest()[:8], "little")).standard_normal(384)
            for t in texts]) if texts else np.zeros((0, 384))
        unit: npt.NDArray[np.float32] = (out / np.linalg.norm(out, axis=1, keepdims=True)
                                         ).astype(np.float32)
        return unit


class MemorySink:
    def __init__(self) -> None:
        self.log: list[tuple[int, str, bytes | None]] = []
        self.latest: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.latest.get(key)

    def send(self, partition: int, key: str, value: bytes | None) -> None:
        self.log.append((partition, key, value))
        if value is None:
            self.latest.pop(key, None)
        else:
            self.latest[key] = value

    async def flush(self) -> None:
        return None


def events(n: int, session: str = "s1", partition: int = 0) -> list[LoggedEvent]:
    out = []
    for i in range(n):
        fact = i % 3 == 0
        event = Event.model_validate({
            "event_id": f"01900000-{i:04x}-7000-8000-{hash(session) & 0xFFFF:04x}{i:08x}",
            "tenant": "acme", "agent": "a", "session": session,
            "subject": "user:ana" if fact else None,
            "kind": "fact_asserted" if fact else "message", "occurred_at": T0,
            "provenance": {"source": "test"},
            "payload": ({"relation": f"r{i}", "object": f"o{i}"} if fact
                        else {"role": "user", "text": f"message number {i}"})})
        out.append(LoggedEvent(event, LogPosition(T0 + timedelta(minutes=i), partition, i)))
    return out


def updater() -> tuple[SessionStateUpdater, MemorySink]:
    sink = MemorySink()
    return SessionStateUpdater(sink, sink, HashEncoder(), capacity=2), sink


def _rel(a: object, b: object) -> float:
    import torch

    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    return float((a - b).norm() / b.norm())


def test_redelivered_batches_add_nothing_and_eviction_loses_nothing() -> None:
    up, _ = updater()
    stream = events(20)
    asyncio.run(up.apply(stream[:12]))
    again = asyncio.run(up.apply(stream[5:20]))  # overlap: 5..11 were applied
    assert again.skipped == 7
    other, _ = updater()
    asyncio.run(other.apply(stream))
    a, b = up.state("acme/s1"), other.state("acme/s1")
    assert a is not None and b is not None
    assert _rel(a.sums_at(), b.sums_at()) <= 1e-12
    for s in ("s2", "s3"):  # capacity 2: s1 is evicted, then reloaded from its snapshot
        asyncio.run(up.apply(events(3, s)))
    assert "acme/s1" not in up.arena
    asyncio.run(up.apply(stream))  # all skipped, after reloading
    c = up.state("acme/s1")
    assert c is not None and _rel(c.sums_at(), b.sums_at()) <= 1e-12


def test_forgetting_an_event_equals_a_state_built_without_it_and_is_idempotent() -> None:
    stream = events(30)
    gone = [stream[3], stream[10]]  # a fact and a message
    up, _ = updater()
    asyncio.run(up.apply(stream))
    assert asyncio.run(up.remove(gone, request_mark=(0, 7))) == 2
    assert asyncio.run(up.remove(gone, request_mark=(0, 7))) == 0  # same request again
    without, _ = updater()
    asyncio.run(without.apply([e for e in stream if e not in gone]))
    a, b = up.state("acme/s1"), without.state("acme/s1")
    assert a is not None and b is not None
    assert _rel(a.sums_at(), b.sums_at()) <= 1e-12
    assert a.counts == b.counts


def test_forgetting_an_event_the_state_never_added_changes_nothing() -> None:
    stream = events(10)
    up, _ = updater()
    asyncio.run(up.apply(stream[:5]))
    before = up.state("acme/s1")
    assert asyncio.run(up.remove([stream[7]], request_mark=(0, 1))) == 0
    after = up.state("acme/s1")
    assert before is not None and after is not None
    assert bool((before.sums == after.sums).all())


def test_dropping_a_session_writes_a_tombstone_and_keeps_others() -> None:
    up, sink = updater()
    asyncio.run(up.apply(events(6, "s1", partition=1) + events(6, "s2", partition=0)))
    kept = up.state("acme/s2")
    assert asyncio.run(up.drop([("acme/s1", 1)])) == 1
    assert sink.log[-1] == (1, "acme/s1", None)
    assert up.state("acme/s1") is None and "acme/s1" not in sink.latest
    still = up.state("acme/s2")
    assert kept is not None and still is not None and bool((kept.sums == still.sums).all())


def _interleaved(sessions: int, per: int) -> list[LoggedEvent]:
    """``per`` events of each of ``sessions`` sessions, round robin (as many users at once)."""
    runs = [events(per, f"s{k}", partition=k) for k in range(sessions)]  # positions unique
    return [run[i] for i in range(per) for run in runs]


def test_a_batch_with_more_sessions_than_the_arena_holds_loses_nothing() -> None:
    """Regression: a batch touching more sessions than the arena's capacity (the live worker
    takes 512 events, the arena holds 256 sessions) evicted sessions in the middle of the
    batch: their new items went to slots other sessions then took, and were lost."""
    stream = _interleaved(sessions=5, per=6)
    small, _ = updater()  # capacity 2
    asyncio.run(small.apply(stream[:17]))
    asyncio.run(small.apply(stream[17:]))
    ample = SessionStateUpdater(MemorySink(), MemorySink(), HashEncoder(), capacity=8)
    for e in stream:  # one event at a time: never more than one session per batch
        asyncio.run(ample.apply([e]))
    for k in range(5):
        a, b = small.state(f"acme/s{k}"), ample.state(f"acme/s{k}")
        assert a is not None and b is not None, k
        assert a.counts == b.counts, k
        assert _rel(a.sums_at(), b.sums_at()) <= 1e-12, k


def test_a_batch_staged_before_the_last_is_published_sees_its_snapshots() -> None:
    """The live worker stages a batch on its store thread while the loop may not have sent
    the last one's snapshots yet: a session evicted meanwhile reloads the unsent snapshot."""
    stream = _interleaved(sessions=4, per=4)
    up, sink = updater()
    first = up.stage(stream[:8])
    second = up.stage(stream[8:])  # evicts sessions whose first snapshots are not sent
    asyncio.run(up.publish(first))
    asyncio.run(up.publish(second))
    ample = SessionStateUpdater(MemorySink(), MemorySink(), HashEncoder(), capacity=8)
    asyncio.run(ample.apply(stream))
    for k in range(4):
        a, b = up.state(f"acme/s{k}"), ample.state(f"acme/s{k}")
        assert a is not None and b is not None and a.counts == b.counts, k
        assert _rel(a.sums_at(), b.sums_at()) <= 1e-12, k
        stored = sink.latest[f"acme/s{k}"]
        assert stored is not None


def test_runs_within_cut_in_order_at_the_session_limit() -> None:
    from memstack.pipelines.session_state.items import key_of, runs_within

    stream = _interleaved(sessions=5, per=3)  # s0 s1 s2 s3 s4 s0 s1 ...
    runs = list(runs_within(stream, 2))
    assert [e for run in runs for e in run] == stream  # every event once, in order
    assert all(len({key_of(e.event) for e in run}) <= 2 for run in runs)
    assert [len(run) for run in runs] == [2, 2, 2, 2, 2, 2, 2, 1]
    assert list(runs_within(stream, 5)) == [stream] and list(runs_within([], 2)) == []
