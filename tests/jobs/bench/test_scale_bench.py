"""``memstack bench scale``: its log generator and its oracle (``verify_equal``)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memstack.jobs.bench.scale import PARTITIONS, WARM_PER_PARTITION, warm_up_log
from memstack.jobs.bench.scale.workload import scale_log
from memstack.operators.log import LogPosition
from memstack.pipelines.embedding import shared_encoder
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.shards.layout import shard_dir
from memstack.pipelines.shards.verify import sharded_hashes, single_hashes
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event, EventKind

TOPIC = "t.events"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_scale_log_is_seeded_and_has_straddling_fact_keys() -> None:
    events = scale_log(2, 4, 9, seed=3)
    again = scale_log(2, 4, 9, seed=3)
    assert [(e.kind, e.session, e.text(), e.subject) for e in events] == \
        [(e.kind, e.session, e.text(), e.subject) for e in again]
    messages = [e for e in events if e.kind is EventKind.MESSAGE]
    assert len(messages) == 2 * 4 * 9
    assert len([e for e in events if e.kind is EventKind.FACT_ASSERTED]) == 2 * 4 * 3
    assert len([e for e in events if e.kind is EventKind.FACT_RETRACTED]) == 2 * 4 * 1
    texts = [(e.tenant, e.text()) for e in messages]
    assert len(set(texts)) == len(texts)
    sessions: dict[tuple[str, str | None], set[str]] = defaultdict(set)
    for e in events:
        if e.kind is EventKind.FACT_ASSERTED:
            sessions[(e.tenant, e.subject)].add(e.session)
    assert max(len(s) for s in sessions.values()) >= 3  # one person's facts, many sessions
    assert [e.session for e in events[:8]] == ["s0", "s1", "s2", "s3"] * 2  # interleaved
    assert len(warm_up_log(PARTITIONS)) == WARM_PER_PARTITION * PARTITIONS


def records_of(events: list[Event], partitions: int) -> list[LogRecord]:
    """Events on a log of ``partitions``, a session's events on one partition (as Kafka keys)."""
    offsets: dict[int, int] = defaultdict(int)
    out = []
    for i, event in enumerate(events):
        partition = sum(event.key) % partitions
        position = LogPosition(T0 + timedelta(seconds=i), partition, offsets[partition])
        offsets[partition] += 1
        out.append(LogRecord(TOPIC, event.key, event.to_json(), position, 1))
    return out


def project(directory: Path, records: list[LogRecord]) -> None:
    with Stores.open(directory) as stores:
        projector = StoreProjector(stores, shared_encoder(), TOPIC)
        for start in range(0, len(records), 7):  # batches of several partitions
            projector.commit(projector.prepare(records[start:start + 7]))


def test_verify_equal_holds_for_shards_of_the_same_log_and_fails_when_one_lacks_a_row(
        tmp_path: Path) -> None:
    records = records_of(scale_log(2, 4, 6, seed=5), 4)
    project(tmp_path / "single", records)
    for partition in range(4):
        project(shard_dir(tmp_path / "sharded", partition),
                [r for r in records if r.position.partition == partition])
    single = single_hashes(tmp_path / "single")
    assert sharded_hashes(tmp_path / "sharded") == single
    assert set(single) == {"records", "fact_entries", "fact_versions", "offsets", "memories"}

    last_fact = max(i for i, r in enumerate(records) if b"fact_asserted" in (r.value or b""))
    lacking = [r for i, r in enumerate(records) if i != last_fact]
    for partition in range(4):
        project(shard_dir(tmp_path / "broken", partition),
                [r for r in lacking if r.position.partition == partition])
    found = sharded_hashes(tmp_path / "broken")
    assert found["fact_entries"] != single["fact_entries"]
    assert found["records"] == single["records"]  # a fact is not a record
