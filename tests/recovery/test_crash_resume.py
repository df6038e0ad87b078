"""Crash and resume: ``kill -9`` the live worker at random points while events flow.

A producer thread emits a stream (messages, superseding facts, a few malformed records) while
the worker (``python -m memstack.cli run``, real Faust, real StoreProjector, real files) is
killed with SIGKILL again and again: mostly at a random moment after it joined the group (so
in the middle of batches: embedding, Lance merge, DuckDB commit, DLQ send), sometimes during
start-up. A last run drains the log with ``--until-caught-up``. The stores must then equal a
clean rebuild over the same log: no loss, no duplicate. The seed is printed; set
``MEMSTACK_CRASH_SEED`` to replay a schedule.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from kafka import KafkaProducer

from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.jobs.run import spawn_worker
from memstack.operators.mutations import MemoryRow
from memstack.pipelines import dlq
from memstack.pipelines.log_reader import end_offsets, read_bounded
from memstack.pipelines.rebuild import rebuild
from memstack.pipelines.stores.base import Vectors
from memstack.pipelines.stores.bundle import Stores

log = logging.getLogger(__name__)

KILLS = 10
MALFORMED_EVERY = 40


class Producer(threading.Thread):
    """Emits events at ~``rate``/s until stopped: messages, facts that supersede, bad bytes."""

    def __init__(self, settings: Settings, rate: float) -> None:
        super().__init__(daemon=True)
        self.settings, self.rate = settings, rate
        self.stop = threading.Event()
        self.sent = 0
        self.malformed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            raw = KafkaProducer(bootstrap_servers=self.settings.bootstrap, acks="all")
            with MemoryClient("acme", "helper", settings=self.settings) as client:
                i = 0
                while not self.stop.is_set():
                    self._emit_one(client, raw, i)
                    i += 1
                    time.sleep(1.0 / self.rate)
                client.flush()
            raw.flush()
            raw.close()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _emit_one(self, client: MemoryClient, raw: KafkaProducer, i: int) -> None:
        session = f"s{i % 4}"
        if i % MALFORMED_EVERY == MALFORMED_EVERY - 1:
            raw.send(self.settings.events_topic, key=f"acme/{session}".encode(),
                     value=b"{not json " + str(i).encode())
            self.malformed += 1
        elif i % 5 == 0:
            client.fact(session, f"user:u{i % 3}", "lives_in", f"city {i}")
        else:
            client.message(session, "user", f"turn {i}: tea with {i % 7} sugars")
        self.sent += 1


def wait_for(path: Path, text: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


def applied_total(stores_dir: Path, topic: str) -> int:
    if not (stores_dir / "memstack.duckdb").exists():
        return 0
    with Stores.open(stores_dir, read_only=True) as stores:
        return sum(stores.events.applied_offsets(topic).values())


def kill_loop(settings: Settings, stores_dir: Path, logs: Path, rng: random.Random,
              producer: Producer) -> list[tuple[str, float, int]]:
    """Start and SIGKILL the worker KILLS times; return (phase, seconds alive, applied)."""
    schedule: list[tuple[str, float, int]] = []
    for i in range(KILLS):
        run_log = logs / f"worker-{i}.log"
        started = time.monotonic()
        worker = spawn_worker(settings, stores_dir, "--within", "0.2", log_path=run_log)
        if rng.random() < 0.2:
            phase = "start-up"
            time.sleep(rng.uniform(1.0, 6.0))
        else:
            phase = "running"
            assert wait_for(run_log, "assigned partitions", 150), run_log.read_text()[-2000:]
            time.sleep(rng.uniform(0.5, 8.0))
        assert worker.poll() is None, f"worker {i} exited early:\n{run_log.read_text()[-2000:]}"
        worker.kill()
        worker.wait()
        schedule.append((phase, time.monotonic() - started,
                         applied_total(stores_dir, settings.events_topic)))
        log.info("kill %d (%s) after %.1f s: applied %d, produced %d", i, phase,
                 schedule[-1][1], schedule[-1][2], producer.sent)
    return schedule


def memories(stores: Stores, tenant: str) -> tuple[list[MemoryRow], Vectors]:
    ids = sorted(r.event_id for r in stores.events.records(tenant) if r.text)
    rows = sorted(stores.vectors.get(ids), key=lambda m: m.memory_id)
    return rows, stores.vectors.vectors_of([m.memory_id for m in rows])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_kill_9_at_random_points_equals_a_clean_run(topics: Settings, tmp_path: Path) -> None:
    seed = int(os.environ.get("MEMSTACK_CRASH_SEED", random.randrange(2**32)))
    print(f"crash schedule seed: {seed}")
    rng = random.Random(seed)
    live_dir, clean_dir = tmp_path / "live", tmp_path / "clean"
    producer = Producer(topics, rate=2.0)
    producer.start()
    try:
        schedule = kill_loop(topics, live_dir, tmp_path, rng, producer)
    finally:
        producer.stop.set()
        producer.join(60)
    assert producer.error is None, producer.error
    progress = [applied for _, _, applied in schedule]
    assert sum(1 for a, b in zip([0, *progress], progress, strict=False) if b > a) >= 3, (
        f"too few kills interrupted a worker that was applying events: {schedule}")

    final = spawn_worker(topics, live_dir, "--until-caught-up", log_path=tmp_path / "final.log")
    assert final.wait(timeout=300) == 0, (tmp_path / "final.log").read_text()[-3000:]
    ends = {p: o for p, o in end_offsets(topics.bootstrap, topics.events_topic).items() if o}
    assert sum(ends.values()) == producer.sent

    clean = rebuild(topics.bootstrap, topics.events_topic, clean_dir, batch=500,
                    keys=FileKeyStore(topics.keys_dir))
    with Stores.open(live_dir, read_only=True) as live, \
            Stores.open(clean_dir, read_only=True) as reference:
        assert live.events.applied_offsets(topics.events_topic) == ends
        assert live.events.content_hashes() == reference.events.content_hashes()
        assert live.events.counts() == reference.events.counts()
        live_rows, live_vectors = memories(live, "acme")
        ref_rows, ref_vectors = memories(reference, "acme")
        assert live_rows == ref_rows
        assert live.vectors.count() == reference.vectors.count() == len(ref_rows)
        np.testing.assert_allclose(live_vectors, ref_vectors, atol=1e-5)
    assert clean.dead_letters == producer.malformed

    assert_session_state_equals_a_clean_pass(topics)

    letters = {r.key for r in read_bounded(topics.bootstrap, topics.dlq_topic)}
    assert len(letters) == producer.malformed  # at least once each, duplicates share a key
    for record in read_bounded(topics.bootstrap, topics.dlq_topic):
        assert dlq.decode(record.value or b"").value.startswith(b"{not json ")  # type: ignore[union-attr]


class _MemorySink:
    """The clean pass keeps its snapshots in memory (the live worker's are in the changelog)."""

    def __init__(self) -> None:
        self.latest: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.latest.get(key)

    def send(self, partition: int, key: str, value: bytes | None) -> None:
        if value is not None:
            self.latest[key] = value

    async def flush(self) -> None:
        return None


def assert_session_state_equals_a_clean_pass(topics: Settings) -> None:
    """The session states the killed-and-restarted workers left in the Faust table's changelog
    equal one uninterrupted pass of the same log through the same updater."""
    import asyncio

    from memstack.foundation.sealing import open_record
    from memstack.operators.log import LoggedEvent
    from memstack.operators.session_state.codec import restore_sums
    from memstack.pipelines.embedding import shared_encoder
    from memstack.pipelines.faust_app import group_id
    from memstack.pipelines.session_state.table import (
        SessionStateUpdater,
        changelog_topic,
        latest_snapshots,
    )
    from memstack.schemas.errors import InvalidEventError
    from memstack.schemas.events import Event

    keys = FileKeyStore(topics.keys_dir)
    events = []
    for record in read_bounded(topics.bootstrap, topics.events_topic):
        try:
            opened = open_record(record.value or b"", keys)
        except InvalidEventError:
            continue  # the producer's malformed records
        if isinstance(opened, Event):
            events.append(LoggedEvent(opened, record.position))
    sink = _MemorySink()
    updater = SessionStateUpdater(sink, sink, shared_encoder())
    asyncio.run(updater.apply(sorted(events, key=lambda e: (e.position.partition,
                                                            e.position.offset))))
    live = latest_snapshots(topics.bootstrap, changelog_topic(group_id(topics)))
    assert set(live) == set(sink.latest)
    for key, data in sink.latest.items():
        clean, recovered = restore_sums(data), restore_sums(live[key])
        assert recovered.counts == clean.counts
        assert recovered.marks == clean.marks
        scale = float(clean.sums_at(clean.last_time).abs().max()) or 1.0
        err = float((recovered.sums_at(clean.last_time) - clean.sums_at(clean.last_time))
                    .abs().max()) / scale
        assert err < 1e-4, f"session {key}: state differs from a clean pass by {err:.2e}"
