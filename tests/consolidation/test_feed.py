"""The feed mapping (pure): fact-version mutations of the real operators in, feed items out."""

from __future__ import annotations

import numpy as np
import pytest

from memstack.foundation.errors import ConfigError
from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import DeleteFactVersion, PutFactVersion
from memstack.pipelines.consolidation.feed import (
    BROADCAST,
    FeedRecord,
    Sharding,
    feed_items,
    partition_of,
)
from tests.pipelines.helpers import at, builder, logged, year


def test_a_current_fact_becomes_a_write_item_keyed_by_its_version() -> None:
    b = builder()
    mutations = MemoryOperator().apply_batch([logged(b.fact("s1", "user:ana", "lives_in",
                                                           "Lisbon", valid_from=year(2020)), 1)])
    [item] = feed_items(mutations)
    [version] = [m.row for m in mutations if isinstance(m, PutFactVersion)]
    assert (item.op, item.item_id, item.shard) == ("write", version.version_id, "acme")
    assert item.cue.text() == "user:ana lives_in" and item.object == "Lisbon"
    assert item.source_event_id == version.source_event_id
    assert item.log_time == at(1).timestamp()


def test_supersession_removes_the_old_value_and_writes_the_new() -> None:
    b, op = builder(), MemoryOperator()
    first = op.apply_batch([logged(b.fact("s1", "user:ana", "lives_in", "Lisbon",
                                          valid_from=year(2020)), 1)])
    second = op.apply_batch([logged(b.fact("s1", "user:ana", "lives_in", "Porto",
                                           valid_from=year(2022)), 2)])
    old = feed_items(first)[0]
    items = feed_items(second)
    assert [(i.op, i.object) for i in items] == [("remove", None), ("write", "Porto")]
    assert items[0].item_id == old.item_id and items[0].log_time == at(2).timestamp()
    # The re-cut history version Lisbon [2020, 2022) has a bounded validity: never written.
    assert not any(i.object == "Lisbon" for i in items)


def test_a_retraction_removes_and_writes_nothing() -> None:
    b, op = builder(), MemoryOperator()
    written = feed_items(op.apply_batch([logged(b.fact("s1", "u", "likes", "tea"), 1)]))
    items = feed_items(op.apply_batch([logged(b.retract("s1", "u", "likes", "tea"), 2)]))
    assert [(i.op, i.item_id) for i in items] == [("remove", written[0].item_id)]


def test_a_deleted_version_is_a_broadcast_removal_and_the_last_mutation_wins() -> None:
    b = builder()
    mutations = MemoryOperator().apply_batch([logged(b.fact("s1", "u", "likes", "tea"), 1)])
    put = next(m for m in mutations if isinstance(m, PutFactVersion))
    items = feed_items([put, DeleteFactVersion(put.row.version_id)])
    assert [(i.op, i.shard, i.tenant) for i in items] == [("remove", BROADCAST, None)]
    assert [i.op for i in feed_items([DeleteFactVersion(put.row.version_id), put])] == ["write"]


def test_big_tenants_shard_by_subject_hash_and_others_by_tenant() -> None:
    sharding = Sharding.parse("acme=4, globex=1")
    shards = {sharding.shard_of("acme", f"user:{i}") for i in range(200)}
    assert shards == {f"acme#{k}" for k in range(4)}
    assert sharding.shard_of("acme", "user:7") == sharding.shard_of("acme", "user:7")
    assert sharding.shard_of("globex", "x") == "globex" == Sharding().shard_of("globex", "x")
    with pytest.raises(ConfigError):
        Sharding.parse("acme=four")
    assert {partition_of(s, 3) for s in shards} <= {0, 1, 2}


def test_records_round_trip_on_the_wire_without_texts() -> None:
    b = builder()
    [item] = feed_items(MemoryOperator().apply_batch([logged(b.fact("s1", "u", "likes",
                                                                   "oolong tea"), 1)]))
    rng = np.random.default_rng(0)
    cue, target = rng.standard_normal((2, 384)).astype(np.float32)
    record = FeedRecord("write", item.item_id, item.shard, item.log_time,
                        item.source_event_id, cue, target)
    raw = record.to_bytes()
    back = FeedRecord.from_bytes(raw)
    assert back == record and back.cue is not None and back.target is not None
    assert np.array_equal(back.cue, cue) and np.array_equal(back.target, target)
    assert b"oolong" not in raw and b"likes" not in raw
    with pytest.raises(ValueError, match="not a consolidation feed record"):
        FeedRecord.from_bytes(b'{"v": 1}')
