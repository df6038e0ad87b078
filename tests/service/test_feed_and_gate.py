"""The change feed, the applied-position watch and the stores gate (pure logic, asyncio)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from memstack.foundation.log_coordinates import Position
from memstack.pipelines.service.changes import ChangeFeed, FeedGoneError
from memstack.pipelines.service.gate import ReadWriteGate
from memstack.pipelines.service.watch import AppliedWatch, StoresBehindError


def test_feed_follows_one_tenant_from_a_position() -> None:
    async def scenario() -> list[str]:
        feed = ChangeFeed(Position({0: 0}))
        feed.publish([("acme", "memory_added", {"n": 1}), ("beta", "memory_added", {"n": 2})],
                     Position({0: 1}))
        feed.publish([("acme", "memory_added", {"n": 3})], Position({0: 2}))
        got: list[str] = []
        follower = feed.follow("acme", Position({0: 1}), heartbeat_s=5)
        got.append(await anext(follower))
        waiting = asyncio.ensure_future(anext(follower))
        await asyncio.sleep(0.01)
        feed.publish([("acme", "forgotten", {"n": 4})], Position({0: 2}, {0: 1}))
        got.append(await asyncio.wait_for(waiting, 2))
        return got

    got = asyncio.run(scenario())
    assert '"n": 3' in got[0] and got[0].startswith("id: e0-2\n")
    assert "event: forgotten" in got[1] and "id: e0-2.f0-1" in got[1]


def test_feed_refuses_a_position_older_than_it_keeps() -> None:
    feed = ChangeFeed(Position({0: 5}), capacity=2)
    for n in range(6, 9):
        feed.publish([("acme", "memory_added", {})], Position({0: n}))
    feed.check_from(Position({0: 7}))
    with pytest.raises(FeedGoneError, match="older than the oldest change kept"):
        feed.check_from(Position({0: 5}))


def test_watch_waits_for_the_position_and_says_how_far_behind() -> None:
    applied = {"p": Position({0: 3})}

    async def scenario() -> tuple[float, StoresBehindError]:
        watch = AppliedWatch(lambda: applied["p"])
        started = time.monotonic()

        async def commit() -> None:
            await asyncio.sleep(0.2)
            applied["p"] = Position({0: 6})
            watch.notify()

        mover = asyncio.ensure_future(commit())
        await watch.wait(Position({0: 5}), 5)
        waited = time.monotonic() - started
        await mover
        with pytest.raises(StoresBehindError) as caught:
            await watch.wait(Position({0: 9, 1: 1}), 0.1)
        return waited, caught.value

    waited, behind = asyncio.run(scenario())
    assert 0.15 < waited < 1.0
    assert behind.behind == {"e0": 3, "e1": 1} and "4 record(s) behind" in str(behind)


def test_gate_lets_readers_share_and_a_writer_in_alone() -> None:
    gate = ReadWriteGate()
    log: list[str] = []
    with gate.reading():
        writer = threading.Thread(target=lambda: _write(gate, log))
        writer.start()
        time.sleep(0.1)
        assert log == []  # the writer waits for the reader
        late = threading.Thread(target=lambda: _read(gate, log))
        late.start()
        time.sleep(0.1)
        assert log == []  # a new reader waits behind the waiting writer
    writer.join(2)
    late.join(2)
    assert log == ["write", "read"]


def _write(gate: ReadWriteGate, log: list[str]) -> None:
    with gate.writing():
        time.sleep(0.05)
        log.append("write")


def _read(gate: ReadWriteGate, log: list[str]) -> None:
    with gate.reading():
        log.append("read")


def test_gate_bounds_concurrent_readers() -> None:
    gate = ReadWriteGate(max_readers=2)
    inside: list[int] = []
    peak = [0]
    lock = threading.Lock()

    def read() -> None:
        with gate.reading():
            with lock:
                inside.append(1)
                peak[0] = max(peak[0], len(inside))
            time.sleep(0.05)
            with lock:
                inside.pop()

    threads = [threading.Thread(target=read) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert peak[0] == 2


def test_heavy_reads_have_their_own_bound() -> None:
    gate = ReadWriteGate(max_readers=3, max_heavy=1)
    log: list[str] = []
    with gate.reading(heavy=True):
        second = threading.Thread(target=lambda: _heavy(gate, log))
        second.start()
        time.sleep(0.1)
        with gate.reading():  # a cheap read still enters
            log.append("light")
        assert log == ["light"]
    second.join(2)
    assert log == ["light", "heavy"]


def _heavy(gate: ReadWriteGate, log: list[str]) -> None:
    with gate.reading(heavy=True):
        log.append("heavy")
