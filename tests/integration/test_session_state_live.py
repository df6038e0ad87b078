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


# -- the code ring -------------------------------------------------------------------------------

def ring_updater(capacity: int = 4, salient: float = 0.0) -> tuple[SessionStateUpdater,
                                                                     MemorySink]:
    """An updater whose rings hold ``capacity`` turns (14 bytes each: 64-bit codes)."""
    from memstack.operators.session_state.codes import RingConfig

    sink = MemorySink()
    ring = RingConfig(bits=64, budget=30 + 14 * capacity, salient=salient)
    return SessionStateUpdater(sink, sink, HashEncoder(), ring=ring, capacity=2), sink


def test_the_ring_holds_the_latest_turns_and_travels_in_the_snapshot() -> None:
    from memstack.operators.session_state.codec import restore_sums

    up, sink = ring_updater()
    stream = events(12)  # turns at offsets 1, 2, 4, 5, 7, 8, 10, 11 (every third is a fact)
    asyncio.run(up.apply(stream))
    state = up.state("acme/s1")
    assert state is not None and state.ring is not None
    assert state.ring.offsets.tolist() == [7, 8, 10, 11]
    stored = restore_sums(sink.latest["acme/s1"]).ring
    assert stored is not None and stored.same_as(state.ring)
    for s in ("s2", "s3"):  # capacity 2: s1 is evicted, then reloaded with its ring
        asyncio.run(up.apply(events(3, s)))
    asyncio.run(up.apply(stream))
    again = up.state("acme/s1")
    assert again is not None and again.ring is not None and again.ring.same_as(state.ring)


def test_forgetting_a_held_turn_refills_the_ring_from_the_kept_turns() -> None:
    from memstack.pipelines.session_state.table import item_of

    stream = events(12)
    gone = [stream[8], stream[11]]  # two turns the ring holds
    up, _ = ring_updater()
    asyncio.run(up.apply(stream))
    kept = [i for e in stream if e not in gone and (i := item_of(e)) is not None]
    items = [i for e in gone if (i := item_of(e)) is not None]
    plan = up.removal(items, (0, 3), kept)
    assert [i.offset for i in plan.refill["acme/s1"]] == [4, 5, 7, 10]  # what it will hold
    asyncio.run(up.apply_removal(plan))
    without, _ = ring_updater()
    asyncio.run(without.apply([e for e in stream if e not in gone]))
    a, b = up.state("acme/s1"), without.state("acme/s1")
    assert a is not None and b is not None and a.ring is not None and b.ring is not None
    assert a.ring.same_as(b.ring)
    assert a.ring.offsets.tolist() == [4, 5, 7, 10]
    recomputed = up.recompute(kept)["acme/s1"].ring
    assert recomputed is not None and recomputed.same_as(b.ring)


def test_a_ring_with_salient_slots_forgets_exactly_too() -> None:
    from memstack.pipelines.session_state.table import item_of

    stream = events(30)  # turns say "message number i": numbers from 10 on are longer
    up, _ = ring_updater(capacity=6, salient=0.5)
    asyncio.run(up.apply(stream))
    before = up.state("acme/s1")
    assert before is not None and before.ring is not None
    held = before.ring.offsets.tolist()
    assert held[-3:] == [26, 28, 29] and all(o >= 10 for o in held)
    gone = [stream[held[0]], stream[29]]  # a salient turn and the newest
    kept = [i for e in stream if e not in gone and (i := item_of(e)) is not None]
    items = [i for e in gone if (i := item_of(e)) is not None]
    asyncio.run(up.apply_removal(up.removal(items, (0, 3), kept)))
    without, _ = ring_updater(capacity=6, salient=0.5)
    asyncio.run(without.apply([e for e in stream if e not in gone]))
    a, b = up.state("acme/s1"), without.state("acme/s1")
    assert a is not None and b is not None and a.ring is not None and b.ring is not None
    assert a.ring.same_as(b.ring) and not {held[0], 29} & set(a.ring.offsets.tolist())


def test_a_snapshot_without_a_ring_still_restores_and_keeps_none() -> None:
    from dataclasses import replace

    from memstack.operators.session_state.codec import restore_sums, snapshot_sums

    up, _ = ring_updater()
    asyncio.run(up.apply(events(6)))
    state = up.state("acme/s1")
    assert state is not None
    legacy = restore_sums(snapshot_sums(replace(state, ring=None)))
    assert legacy.ring is None and legacy.counts == state.counts
    other, sink = ring_updater()
    sink.latest["acme/s1"] = snapshot_sums(replace(state, ring=None))
    asyncio.run(other.apply(events(9)[6:]))  # a new turn on a state without a ring
    after = other.state("acme/s1")
    assert after is not None and after.ring is None  # until replay rebuilds it
