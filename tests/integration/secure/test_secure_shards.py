"""Two sharded workers (``memstack shards worker``) over SASL_SSL with SCRAM-SHA-512: they
consume as the service principal, events written by the agent principal are applied, and the
router's answers equal those of one store rebuilt over the same log."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.jobs.sample import sample_conversation
from memstack.jobs.shards import discover_workers, spawn_shard_worker, wait_for_cards
from memstack.pipelines.stores.bundle import Stores
from memstack.server.router.fanout import Fanout
from memstack.view.ops import Query as Q
from tests.integration.secure.conftest import TEST_PARTITIONS, SecureTopics
from tests.shards.deployment import (
    FAR,
    build_reference,
    direct_hashes,
    emit,
    routed,
    routed_hashes,
    stop_workers,
    wait_complete,
)

B = EventBuilder(Defaults("acme", "helper"))


@pytest.mark.timeout(600)  # ~30 s here: two workers load the model
def test_two_sharded_workers_apply_events_written_over_sasl_ssl(
        secure_topics: SecureTopics, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    service = secure_topics.use(monkeypatch, "service")  # workers, the reference and offsets
    events = [e for i in range(3) for e in sample_conversation(B, f"s{i}")]
    written = emit(secure_topics.settings("agent"), events)  # the producer-only principal
    assert sum(written.values()) == len(events) and len(written) >= 2
    root, logs = tmp_path / "sharded", tmp_path / "logs"
    logs.mkdir()
    workers = {name: spawn_shard_worker(service, root, name, logs / f"{name}.log",
                                        "--within", "0.1") for name in ("w1", "w2")}
    fanout = Fanout(discover_workers(root, []), list(range(TEST_PARTITIONS)))
    try:
        wait_for_cards(root, list(workers))
        coverage = wait_complete(fanout, service)
        assert len(set(coverage.owners.values())) == 2, coverage  # both own partitions
        known = datetime.now(UTC).isoformat()
        qs = [Q("records", FAR, known), Q("facts", FAR, known),
              Q("history", FAR, known, subject="user:ana")]
        body, memory = routed(fanout, "acme", Q("records", FAR, known))
        assert not memory.partial and body["records"], body
        single = build_reference(service, tmp_path / "single")
        with Stores.open(single, read_only=True) as stores:
            assert routed_hashes(fanout, ["acme"], qs) == direct_hashes(stores, ["acme"], qs)
    finally:
        fanout.close()
        stop_workers(workers, logs)
