"""LiveProcessor: batches in, projector calls out; gaps held back, dead letters before commit.

Uses an in-memory projector double (pure logic, no stores, no broker).
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from types import SimpleNamespace

import numpy as np
import pytest

from memstack.operators.log import LogPosition
from memstack.pipelines.contracts import DeadLetter, Plan
from memstack.pipelines.faust_app import faust_broker_url
from memstack.pipelines.faust_records import record_of
from memstack.pipelines.live_batches import LiveProcessor
from memstack.pipelines.log_reader import LogRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def rec(partition: int, offset: int, value: bytes = b"{}") -> LogRecord:
    return LogRecord("t.events", b"k", value, LogPosition(T0, partition, offset), 1)


class DoubleProjector:
    """Skips applied offsets, dead-letters values that are not JSON objects, logs its calls."""

    def __init__(self, applied: dict[int, int] | None = None) -> None:
        self.applied = dict(applied or {})
        self.rows: list[tuple[int, int]] = []
        self.calls: list[str] = []
        self._pending: list[list[tuple[int, int]]] = []
        """Rows per prepared plan (a batch may be prepared before the previous one commits)."""

    def applied_offsets(self) -> dict[int, int]:
        return dict(self.applied)

    def prepare(self, records: list[LogRecord]) -> Plan:
        self.calls.append("prepare")
        fresh = [r for r in records
                 if r.position.offset >= self.applied.get(r.position.partition, 0)]
        dead = [DeadLetter(r.topic, r.position.partition, r.position.offset, r.key, r.value,
                           "not an object", "$")
                for r in fresh if not (r.value or b"").startswith(b"{")]
        nxt: dict[int, int] = {}
        for r in fresh:
            nxt[r.position.partition] = r.position.offset + 1
        plan = Plan([], [], dead, nxt)
        self._pending.append([(r.position.partition, r.position.offset)
                              for r in fresh if (r.value or b"").startswith(b"{")])
        return plan

    def commit(self, plan: Plan) -> None:
        self.calls.append("commit")
        self.rows.extend(self._pending.pop(0))  # commits come in prepare order
        self.applied.update(plan.next_offsets)

    def close(self) -> None:
        self.calls.append("close")


class Harness:
    def __init__(self, applied: dict[int, int] | None = None,
                 log_offsets: dict[int, list[int]] | None = None) -> None:
        self.projector = DoubleProjector(applied)
        self.sent: list[DeadLetter] = []
        self.seeks: list[tuple[int, int]] = []
        self.probes: list[tuple[int, int]] = []
        self.log_offsets = log_offsets or {}
        self.processor = LiveProcessor(self.projector, self._send, self._seek, self._probe)

    async def _send(self, letters: list[DeadLetter]) -> None:
        self.projector.calls.append("send")
        self.sent.extend(letters)

    async def _seek(self, partition: int, offset: int) -> None:
        self.seeks.append((partition, offset))

    def _probe(self, partition: int, offset: int) -> int | None:
        self.probes.append((partition, offset))
        return next((o for o in self.log_offsets.get(partition, []) if o >= offset), None)

    def run(self, *batches: list[LogRecord]) -> None:
        async def go() -> None:
            await self.processor.load_offsets()
            for batch in batches:
                await self.processor.process(batch)
            await self.processor.drain()
        asyncio.run(go())


def test_dead_letters_are_sent_before_the_commit_and_valid_records_around_them_kept() -> None:
    h = Harness()
    h.run([rec(0, 0), rec(0, 1, b"garbage"), rec(0, 2), rec(1, 0)])
    assert h.projector.calls == ["prepare", "send", "commit"]
    assert [(d.partition, d.offset) for d in h.sent] == [(0, 1)]
    assert sorted(h.projector.rows) == [(0, 0), (0, 2), (1, 0)]
    assert h.processor.applied_offsets() == {0: 3, 1: 1}
    assert h.processor.stats.dead_letters == 1


def test_records_before_the_applied_offsets_are_skipped_not_reapplied() -> None:
    h = Harness(applied={0: 2})
    h.run([rec(0, 0), rec(0, 1), rec(0, 2), rec(0, 3)])
    assert h.projector.rows == [(0, 2), (0, 3)]
    assert h.seeks == []


def test_far_behind_partition_seeks_ahead_once() -> None:
    h = Harness(applied={0: 500})
    h.run([rec(0, 0), rec(0, 1)], [rec(0, 2), rec(0, 3)])
    assert h.seeks == [(0, 500)]
    assert h.projector.rows == []


def test_gap_is_held_back_and_consumer_sought_to_the_first_missing_offset() -> None:
    h = Harness(applied={0: 5}, log_offsets={0: list(range(20))})
    h.run([rec(0, 10), rec(0, 11), rec(1, 0)], [rec(0, 12)], [rec(0, o) for o in range(5, 13)])
    assert h.seeks == [(0, 5)]
    assert h.probes == [(0, 5)]  # one probe per missing offset, not per stale batch
    assert h.projector.rows == [(1, 0)] + [(0, o) for o in range(5, 13)]
    assert h.processor.stats.gaps == 1


def test_gap_the_log_confirms_is_accepted() -> None:
    h = Harness(applied={0: 5}, log_offsets={0: [0, 1, 2, 3, 4, 9, 10]})
    h.run([rec(0, 9), rec(0, 10)])
    assert h.projector.rows == [(0, 9), (0, 10)]
    assert h.seeks == []


def test_unanswered_probe_holds_back_and_probes_again() -> None:
    h = Harness(applied={0: 5}, log_offsets={})
    h.run([rec(0, 9)], [rec(0, 9)])
    assert h.projector.rows == []
    assert h.probes == [(0, 5), (0, 5)]
    assert h.seeks == [(0, 5), (0, 5)]


def test_failed_dead_letter_send_does_not_commit() -> None:
    h = Harness()

    async def refuse(letters: list[DeadLetter]) -> None:
        raise RuntimeError("broker down")

    h.processor._send = refuse
    with pytest.raises(RuntimeError):
        h.run([rec(0, 0, b"garbage")])
    assert "commit" not in h.projector.calls
    assert h.processor.applied_offsets() == {}


def test_on_assigned_reloads_and_seeks_to_stored_offsets() -> None:
    h = Harness(applied={0: 7, 2: 3})

    async def go() -> None:
        await h.processor.on_assigned([0, 1, 2])

    asyncio.run(go())
    assert h.seeks == [(0, 7), (1, 0), (2, 3)]


def test_faust_message_becomes_log_record_with_the_log_time_in_millis() -> None:
    message = SimpleNamespace(topic="t.events", partition=1, offset=9, timestamp=1764000000.123,
                              timestamp_type=1, key=b"k", value=b"v")
    record = record_of(message)
    assert record.position == LogPosition(datetime.fromtimestamp(1764000000123 / 1000, UTC), 1, 9)
    assert (record.key, record.value, record.timestamp_type) == (b"k", b"v", 1)


def test_broker_url() -> None:
    assert faust_broker_url("a:1,b:2") == "kafka://a:1;kafka://b:2"


def test_a_forget_waits_for_the_batch_between_its_prepare_and_commit() -> None:
    """A forget run on the store thread while a batch's dead letters are being sent must wait
    for that batch's commit, or the commit would write back what the forget erased."""
    h = Harness()
    release = asyncio.Event()

    async def slow_send(letters: list[DeadLetter]) -> None:
        h.projector.calls.append("send")
        await release.wait()

    h.processor._send = slow_send

    async def go() -> None:
        await h.processor.load_offsets()
        batch = asyncio.ensure_future(h.processor.process([rec(0, 0), rec(0, 1, b"bad")]))
        await asyncio.sleep(0.05)  # the batch is prepared and waits on its dead letter
        forget = asyncio.ensure_future(h.processor.on_store(h.projector.calls.append, "forget"))
        await asyncio.sleep(0.05)
        assert "forget" not in h.projector.calls
        release.set()
        await asyncio.gather(batch, forget)

    asyncio.run(go())
    assert h.projector.calls == ["prepare", "send", "commit", "forget"]


class EmbeddingProjector(DoubleProjector):
    """Logs when each batch's encode and write start and end (threads named)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []
        self.release_first_encode = threading.Event()

    def prepare(self, records: list[LogRecord]) -> Plan:
        plan = super().prepare(records)
        self.log.append(f"prepare {records[0].position.offset}")
        return Plan(plan.events, plan.mutations, plan.dead_letters, plan.next_offsets,
                    vectors={str(records[0].position.offset): np.zeros(2, np.float32)})

    def embed(self, plan: Plan) -> Plan:
        first = next(iter(plan.vectors))
        self.log.append(f"encode {first}")
        if first == "0":
            assert self.release_first_encode.wait(5)
        return plan

    def commit(self, plan: Plan) -> None:
        self.log.append(f"write {next(iter(plan.vectors))}")
        super().commit(plan)


def test_the_next_batch_is_prepared_while_the_previous_one_encodes() -> None:
    """Two batches in flight: batch 1 is prepared (and its encode queued) while batch 0 still
    encodes; writes stay in log order, each after its own encode."""
    projector = EmbeddingProjector()
    committed: list[dict[int, int]] = []

    async def send(letters: list[DeadLetter]) -> None:
        return None

    async def seek(partition: int, offset: int) -> None:
        return None

    processor = LiveProcessor(projector, send, seek, lambda p, o: None, embed=projector.embed)
    processor.committed.append(lambda plan: committed.append(plan.next_offsets))

    async def go() -> None:
        await processor.load_offsets()
        await processor.process([rec(0, 0)])  # returns once prepared: batch 0 encodes
        second = asyncio.ensure_future(processor.process([rec(0, 1)]))
        for _ in range(100):
            await asyncio.sleep(0.01)
            if "prepare 1" in projector.log:
                break
        assert projector.log == ["prepare 0", "encode 0", "prepare 1"]
        assert processor.applied_offsets() == {} and committed == []
        assert not second.done()  # it returns once batch 0 has committed
        projector.release_first_encode.set()
        await second
        await processor.drain()

    asyncio.run(go())
    processor.close()
    assert projector.log in (["prepare 0", "encode 0", "prepare 1", "write 0", "encode 1",
                              "write 1"],
                             ["prepare 0", "encode 0", "prepare 1", "encode 1", "write 0",
                              "write 1"])
    assert committed == [{0: 1}, {0: 2}]
    assert processor.applied_offsets() == {0: 2}


def test_after_a_failed_write_no_later_batch_writes_and_the_failure_is_reported() -> None:
    h = Harness()
    failures: list[BaseException] = []
    h.processor.on_failure.append(failures.append)
    commit = h.projector.commit

    def fail_first(plan: Plan) -> None:
        if plan.next_offsets == {0: 1}:
            raise OSError("disk full")
        commit(plan)

    h.projector.commit = fail_first  # type: ignore[method-assign]

    async def go() -> None:
        await h.processor.load_offsets()
        await h.processor.process([rec(0, 0)])
        with pytest.raises(OSError):
            await h.processor.process([rec(0, 1)])
            await h.processor.drain()
        with pytest.raises(OSError):
            await h.processor.on_store(h.projector.calls.append, "forget")

    asyncio.run(go())
    assert [type(f) for f in failures] == [OSError]
    assert h.projector.rows == [] and h.processor.applied_offsets() == {}
    assert "forget" not in h.projector.calls
