"""``ShardedProjector``'s ownership logic with projector doubles (pure logic, no broker)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memstack.operators.log import LogPosition
from memstack.pipelines.contracts import Plan
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.shards.layout import shard_dir
from memstack.pipelines.shards.projector import ShardedProjector
from memstack.pipelines.stores.errors import StoreLockedError

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def rec(partition: int, offset: int) -> LogRecord:
    return LogRecord("t.events", b"k", b"{}", LogPosition(T0, partition, offset), 1)


class CountingProjector:
    """Applies nothing but offsets; remembers its directory and what it committed."""

    def __init__(self, directory: Path, applied: int = 0) -> None:
        self.directory = directory
        self.partition = int(directory.name[1:])
        self.applied = applied
        self.committed: list[int] = []
        self.closed = False

    def applied_offsets(self) -> dict[int, int]:
        return {self.partition: self.applied} if self.applied else {}

    def prepare(self, records: list[LogRecord]) -> Plan:
        assert {r.position.partition for r in records} == {self.partition}
        return Plan([], [], [], {self.partition: max(r.position.offset for r in records) + 1})

    def commit(self, plan: Plan) -> None:
        self.applied = plan.next_offsets[self.partition]
        self.committed.append(self.applied)

    def close(self) -> None:
        self.closed = True


class FakeStores:
    closed = False

    def close(self) -> None:
        self.closed = True


class Opener:
    def __init__(self, locked: dict[int, int] | None = None) -> None:
        self.opened: dict[int, CountingProjector] = {}
        self.locked = dict(locked or {})

    def __call__(self, directory: Path) -> tuple[Any, Any]:
        partition = int(directory.name[1:])
        if self.locked.get(partition, 0) > 0:
            self.locked[partition] -= 1
            raise StoreLockedError(f"{directory} is held")
        projector = CountingProjector(directory, applied=10 * partition)
        self.opened[partition] = projector
        return projector, FakeStores()


def test_assign_opens_new_shards_closes_revoked_and_reports_catching_up(tmp_path: Path) -> None:
    opener = Opener()
    sharded = ShardedProjector(tmp_path, opener, lambda: {1: 10, 2: 25, 3: 30})
    sharded.assign([1, 2])
    assert sharded.owned() == [1, 2]
    assert opener.opened[2].directory == shard_dir(tmp_path, 2)
    assert sharded.applied_offsets() == {1: 10, 2: 20}
    assert sharded.catching_up() == [2]  # 20 < 25, the end offset when it opened
    sharded.assign([2, 3])
    assert opener.opened[1].closed and not opener.opened[2].closed
    assert sharded.owned() == [2, 3]


def test_prepare_splits_by_partition_and_leaves_unowned_records(tmp_path: Path) -> None:
    opener = Opener()
    sharded = ShardedProjector(tmp_path, opener, dict)
    sharded.assign([1, 2])
    plan = sharded.prepare([rec(1, 10), rec(2, 20), rec(5, 0), rec(1, 11)])
    assert plan.next_offsets == {1: 12, 2: 21}
    sharded.commit(plan)
    assert opener.opened[1].committed == [12] and opener.opened[2].committed == [21]
    assert sharded.applied_offsets() == {1: 12, 2: 21}
    assert sharded.catching_up() == []


def test_a_held_shard_is_waited_for_unless_a_newer_rebalance_came(tmp_path: Path) -> None:
    opener = Opener(locked={1: 2})
    sharded = ShardedProjector(tmp_path, opener, dict)
    sharded.assign([1], sharded.expect())
    assert sharded.owned() == [1]  # opened on the third try

    opener = Opener(locked={2: 1})
    sharded = ShardedProjector(tmp_path, opener, dict)
    stale = sharded.expect()
    sharded.expect()  # a newer rebalance
    sharded.assign([2], stale)
    assert sharded.owned() == []


def test_a_shard_held_too_long_fails_the_assignment(tmp_path: Path) -> None:
    sharded = ShardedProjector(tmp_path, Opener(locked={1: 100}), dict, open_timeout_s=0.1)
    with pytest.raises(StoreLockedError):
        sharded.assign([1])
