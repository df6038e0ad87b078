"""The replay's prepare stage outside Flink: batches cut, embedded on a background thread and
emitted in the order they were cut (every record exactly once), with the real model; and the
record buckets spread a partition's records evenly."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.replay.functions import (
    END_OF_TIME,
    Item,
    PrepareStage,
    record_bucket,
)
from memstack.pipelines.replay.source import to_log_record
from memstack.pipelines.replay.wiring import WriterConfig, embed_items


class _Timers:
    def register_event_time_timer(self, ts: int) -> None:
        assert ts == END_OF_TIME


class _Ctx:
    """The two things PrepareStage asks of Flink's context."""

    def __init__(self, key: int) -> None:
        self.key = key

    def get_current_key(self) -> int:
        return self.key

    def timer_service(self) -> _Timers:
        return _Timers()


def _items(n: int) -> list[Item]:
    builder = EventBuilder(Defaults("acme", "helper"))
    out = []
    for i in range(n):
        event = builder.message(f"s{i % 7}", "user", f"turn {i}: the crane arrives at {i % 13}")
        record = to_log_record("t.events", f"acme/s{i % 7}".encode(),
                               event.model_dump_json().encode(), i % 2, i // 2, 1_700_000_000_000,
                               "LogAppendTime")
        out.append(Item(record, i // 2 - 1 if i >= 2 else -1))
    return out


@pytest.fixture(scope="module")
def minilm() -> MiniLMEncoder:
    return MiniLMEncoder().load()


def test_batches_leave_in_cut_order_each_record_once_with_its_vector(
        minilm: MiniLMEncoder) -> None:
    stage = PrepareStage(WriterConfig(into=None, topic="t.events", bootstrap="-",  # type: ignore[arg-type]
                                      dlq_topic="t.dlq", embed_batch=8))
    stage.open(None)
    stage.encoder = minilm
    items = _items(45)
    out: list[Any] = []
    for n, item in enumerate(items):
        out.extend(stage.process_element(item, _Ctx(n % 3)))
        assert len(stage.inflight) <= 2  # bounded: at most one batch waits behind the model
    out.extend(stage.on_timer(END_OF_TIME, _Ctx(0)))
    stage.close()
    assert [o.record.position for o in out] == [i.record.position for i in items]
    assert all(o.ready_at > 0 for o in out)
    texts = [o.text for o in out]
    vectors = np.stack([np.frombuffer(o.vector, dtype=np.float32) for o in out])
    np.testing.assert_allclose(vectors, minilm.encode(texts), atol=1e-5)


def test_record_buckets_spread_a_partition_evenly() -> None:
    counts = Counter(record_bucket(p, o, 256) for p in range(3) for o in range(2560))
    assert len(counts) == 256
    assert max(counts.values()) - min(counts.values()) <= 3


def test_only_memory_kinds_are_embedded_and_a_repeated_text_once() -> None:
    builder = EventBuilder(Defaults("acme", "helper"))
    events = [builder.fact("s1", "user:ana", "lives_in", "Lisbon"),
              builder.message("s1", "user", "I moved to Lisbon"),
              builder.tool_result("s1", "search", "c1", "ok"),
              builder.tool_result("s1", "search", "c2", "ok")]
    stage = PrepareStage(WriterConfig(into=None, topic="t.events", bootstrap="-",  # type: ignore[arg-type]
                                      dlq_topic="t.dlq"))
    items = [stage._prepared(Item(to_log_record("t.events", b"acme/s1",
                                                e.model_dump_json().encode(), 0, n,
                                                1_700_000_000_000, "LogAppendTime"), n - 1))
             for n, e in enumerate(events)]
    assert [i.text for i in items] == [None, "I moved to Lisbon", "ok", "ok"]  # a fact: no row

    class Counting:
        """Counts what is asked of the model (pure logic: which texts, how many times)."""

        name, dim = "counting", 384

        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def encode(self, texts: list[str]) -> np.ndarray:
            self.calls.append(list(texts))
            return np.ones((len(texts), 384), dtype=np.float32)

    counting = Counting()
    out = embed_items(counting, items)  # type: ignore[arg-type]
    assert counting.calls == [["I moved to Lisbon", "ok"]]
    assert [o.vector is not None for o in out] == [False, True, True, True]
