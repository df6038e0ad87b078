"""The live worker over a batch touching more sessions than its state arena holds (256): every
session's state holds every one of its events (a regression: such batches lost items)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack.client import MemoryClient
from memstack.foundation.settings import Settings
from memstack.jobs.run import spawn_worker
from memstack.operators.session_state.codec import restore_sums
from memstack.pipelines.faust_app import group_id
from memstack.pipelines.session_state.table import changelog_topic, latest_snapshots

SESSIONS, PER = 300, 2


@pytest.mark.timeout(600)
def test_a_batch_over_more_sessions_than_the_arena_keeps_every_item(topics: Settings,
                                                                    tmp_path: Path) -> None:
    with MemoryClient("acme", "bot", settings=topics) as client:
        for i in range(PER):  # round robin: every batch of the worker spans many sessions
            for k in range(SESSIONS):
                client.emit(client.events.note(f"s{k}", f"note {i} of session {k}"))
        client.flush()
    log = tmp_path / "worker.log"
    worker = spawn_worker(topics, tmp_path / "stores", "--until-caught-up", log_path=log)
    assert worker.wait(timeout=300) == 0, log.read_text()[-3000:]
    snapshots = latest_snapshots(topics.bootstrap, changelog_topic(group_id(topics)))
    items = {key: sum(restore_sums(value).counts) for key, value in snapshots.items()
             if value is not None}
    assert len(items) == SESSIONS
    assert sorted(set(items.values())) == [PER], {k: n for k, n in items.items() if n != PER}
