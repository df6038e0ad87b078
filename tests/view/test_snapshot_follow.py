"""A reader process's stores (``memstack serve --readers N``): the writer publishes snapshots of
its DuckDB file with what changed, a follower swaps them in and carries its key index over.

Real DuckDB and LanceDB files, the real publisher (pipelines/service/snapshots.py) and the real
follower (jobs/service/follower.py), in one process: after every batch and after a forget's
erase, the follower's key index answers what DuckDB's general plan answers on the writer's
file, so a subject the batch touched is never answered from the older snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstack.foundation.log_coordinates import Position
from memstack.jobs.service.follower import SnapshotFollower
from memstack.operators.log import LoggedEvent
from memstack.operators.memory import MemoryOperator
from memstack.pipelines.forgetting.duckdb_store import DuckDBForgetStore
from memstack.pipelines.service.snapshots import (
    ChangedSince,
    SnapshotManifest,
    SnapshotPublisher,
    read_manifest,
)
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.view.points import points_of
from tests.forget.givens import request
from tests.forget.reference import resolve_events
from tests.view.test_point_reads import _apply, history
from tests.view.test_point_reads import _same as _compare


def _same(oracle: DuckDBEventIndex, snapshot: DuckDBEventIndex, events: list[LoggedEvent]) -> int:
    """The snapshot's key index (held subjects, and loads from the snapshot) against the
    general plan on the writer's file; the answers compared."""
    return _compare(oracle, points_of(snapshot), events, source=snapshot)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Stores]:
    opened = Stores.open(tmp_path / "stores")
    yield opened
    opened.close()


def publisher_of(writer: Stores, tmp_path: Path) -> SnapshotPublisher:
    """The publisher as the service makes it; its position is read from the file before
    each publish (the capture runs under the index's lock, where a query would wait on
    itself: the service reads its applied offsets from memory)."""
    events = live(writer)
    applied: dict[str, Position] = {}
    publisher = SnapshotPublisher(tmp_path / "snapshots", lambda: events,
                                  lambda: applied["now"], Position({0: 0, 1: 0}))
    publish = publisher.publish

    def publish_now() -> SnapshotManifest:
        applied["now"] = Position(events.applied_offsets("t"))
        return publish()

    publisher.publish = publish_now  # type: ignore[method-assign]
    return publisher


def live(writer: Stores) -> DuckDBEventIndex:
    assert isinstance(writer.events, DuckDBEventIndex)
    return writer.events


def snapshot_events(follower: SnapshotFollower) -> DuckDBEventIndex:
    events = follower.stores().events
    assert isinstance(events, DuckDBEventIndex)
    return events


def test_the_followers_key_index_answers_what_the_writer_answers_batch_by_batch(
        writer: Stores, tmp_path: Path) -> None:
    events = history(seed=5, n=60)
    operator = MemoryOperator()
    publisher = publisher_of(writer, tmp_path)
    follower = SnapshotFollower(tmp_path / "snapshots")
    try:
        publisher.publish()
        assert follower.refresh()
        carried = 0
        for start in range(0, len(events), 10):
            _apply(live(writer), operator, events[start:start + 10])
            manifest = publisher.publish()
            assert manifest.subjects is not None and manifest.previous == manifest.seq - 1
            before = points_of(snapshot_events(follower))
            assert follower.refresh()
            snapshot = snapshot_events(follower)
            assert follower.position() == Position(live(writer).applied_offsets("t"))
            points = points_of(snapshot)
            assert _same(live(writer), snapshot, events[:start + 10]) > 0
            carried += sum(1 for key in (("acme", "ana"), ("acme", "bob"))
                           if before.held(*key) is not None and points.held(*key) is not None)
        assert carried > 0  # untouched subjects moved over without a load
    finally:
        follower.close()
        publisher.close()


def test_after_a_forgets_erase_the_follower_holds_nothing_of_the_older_snapshot(
        writer: Stores, tmp_path: Path) -> None:
    events = history(seed=9, n=40)
    _apply(live(writer), MemoryOperator(), events)
    publisher = publisher_of(writer, tmp_path)
    follower = SnapshotFollower(tmp_path / "snapshots")
    try:
        publisher.publish()
        follower.refresh()
        _same(live(writer), snapshot_events(follower), events)  # every subject held
        old_file = tmp_path / "snapshots" / read_manifest(tmp_path / "snapshots").duckdb  # type: ignore[union-attr]
        targets = resolve_events(request({"type": "subject", "subject": "ana"}), events)
        events_index = writer.events
        assert isinstance(events_index, DuckDBEventIndex)
        DuckDBForgetStore.over(events_index).erase(targets)
        manifest = publisher.publish()
        assert manifest.subjects is None  # an erase: anything may have changed
        assert not old_file.exists()  # its bytes held what was erased: removed at once
        follower.refresh()
        assert points_of(snapshot_events(follower)).held("acme", "bob") is None  # none kept
        kept = [e for e in events if e.event.event_id not in targets.event_ids]
        assert _same(events_index, snapshot_events(follower), kept) > 0
    finally:
        follower.close()
        publisher.close()
    assert not (tmp_path / "snapshots" / "manifest.json").exists()


def test_a_follower_that_missed_a_snapshot_keeps_nothing(writer: Stores,
                                                         tmp_path: Path) -> None:
    events = history(seed=3, n=30)
    operator = MemoryOperator()
    publisher = publisher_of(writer, tmp_path)
    follower = SnapshotFollower(tmp_path / "snapshots")
    try:
        _apply(live(writer), operator, events[:10])
        publisher.publish()
        follower.refresh()
        _same(live(writer), snapshot_events(follower), events[:10])
        _apply(live(writer), operator, events[10:20])
        publisher.publish()  # not seen: its changes are not in the next manifest
        _apply(live(writer), operator, events[20:])
        publisher.publish()
        follower.refresh()
        points = points_of(snapshot_events(follower))
        assert not any(points.held("acme", s) for s in ("ana", "bob", "cy"))
        assert _same(live(writer), snapshot_events(follower), events) > 0
    finally:
        follower.close()
        publisher.close()


def test_changed_since_names_the_touched_subjects_and_deleted_ids() -> None:
    from memstack.operators.mutations import DeleteFactEntry, DeleteFactVersion, PutFactVersion

    events = history(seed=1, n=12)
    mutations = MemoryOperator().apply_batch(events)
    changes = ChangedSince()
    changes.take()  # the first snapshot says "everything"; start from a published one
    changes(mutations)
    changes([DeleteFactVersion("v-gone"), DeleteFactEntry("e-gone")])
    subjects, ids = changes.take()
    expected = {(m.row.tenant, m.row.subject) for m in mutations if isinstance(m, PutFactVersion)}
    assert subjects is not None and expected and expected <= set(subjects)
    assert ids == ["e-gone", "v-gone"]
    assert changes.take() == ([], [])
    changes(None)
    assert changes.take() == (None, [])


def test_changes_of_manifests_read_without_a_swap_add_up(writer: Stores,
                                                         tmp_path: Path) -> None:
    """A reader reads every manifest but swaps only now and then: what each says changed
    adds up, so the subjects it keeps across several snapshots are exact."""
    events = history(seed=13, n=60)
    operator = MemoryOperator()
    publisher = publisher_of(writer, tmp_path)
    follower = SnapshotFollower(tmp_path / "snapshots")
    try:
        _apply(live(writer), operator, events[:12])
        publisher.publish()
        follower.refresh()
        _same(live(writer), snapshot_events(follower), events[:12])  # every subject held
        for start in range(12, 60, 12):
            _apply(live(writer), operator, events[start:start + 12])
            publisher.publish()
            assert not follower.refresh(swap=False) and follower.behind
        assert follower.refresh()
        assert _same(live(writer), snapshot_events(follower), events) > 0
    finally:
        follower.close()
        publisher.close()
