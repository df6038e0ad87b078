"""Forgetting in the live worker: a request on the ledger is applied by the running pipeline.

Events are sealed (crypto-shredding on). The worker indexes two sessions; a session forget
arrives; the next worker run applies it between batches: the session's rows are gone from
DuckDB (and its bytes from the file), from LanceDB, and its log payloads are unreadable, while
the other session is untouched and a later event of the forgotten session is new data.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.sealing import Shredded, open_record
from memstack.foundation.settings import Settings
from memstack.jobs.run import spawn_worker
from memstack.operators.session_state.codec import restore_sums
from memstack.pipelines.faust_app import group_id
from memstack.pipelines.log_reader import read_bounded
from memstack.pipelines.session_state.table import changelog_topic, latest_snapshots
from memstack.pipelines.stores.bundle import Stores

SECRET = "my locker code is 7731 at the Graca gym"


def run_worker(settings: Settings, stores: Path, log: Path) -> None:
    worker = spawn_worker(settings, stores, "--until-caught-up", "--within", "0.1", log_path=log)
    assert worker.wait(timeout=240) == 0, log.read_text()[-3000:]


@pytest.mark.timeout(600)
def test_session_forget_is_applied_by_the_live_worker(topics: Settings, tmp_path: Path) -> None:
    keys = FileKeyStore(topics.keys_dir)
    stores_dir = tmp_path / "stores"
    with MemoryClient("acme", "bot", settings=topics, keys=keys) as client:
        for i in range(3):
            client.message("s-keep", "user", f"I water the basil every {i + 2} days")
        client.message("s-gone", "user", SECRET)
        client.note("s-gone", "user keeps valuables at the gym")
    run_worker(topics, stores_dir, tmp_path / "w1.log")
    with Stores.open(stores_dir, read_only=True) as stores:
        assert len(stores.events.records("acme", session="s-gone")) == 2

    with MemoryClient("acme", "bot", settings=topics, keys=keys) as client:
        client.forget({"type": "session", "session": "s-gone"}, reason="user asked")
        client.flush()
        time.sleep(0.01)  # log times are milliseconds; a tie with the request counts as covered
        later = client.message("s-gone", "user", "a new conversation after the forget")
    run_worker(topics, stores_dir, tmp_path / "w2.log")

    with Stores.open(stores_dir, read_only=True) as stores:
        gone = stores.events.records("acme", session="s-gone")
        assert [r.event_id for r in gone] == [later.event_id]  # only the new data
        assert len(stores.events.records("acme", session="s-keep")) == 3
        hits = stores.vectors.search_text("locker code gym", tenant="acme", k=10)
        assert all(h.row.session != "s-gone" or h.row.event_id == later.event_id for h in hits)
    assert SECRET.encode() not in (stores_dir / "memstack.duckdb").read_bytes()
    for path in (stores_dir / "lance").rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    old = [open_record(r.value or b"", keys) for r in read_bounded(topics.bootstrap,
                                                                   topics.events_topic)]
    shredded = [e for e in old if isinstance(e, Shredded)]
    assert len(shredded) == 2  # the two events logged before the request
    assert SECRET.encode() not in b"".join(
        r.value or b"" for r in read_bounded(topics.bootstrap, topics.events_topic))

    # The forgotten events' terms left the session's recurrent state: what it holds now is the
    # one event logged after the request. (Whether the state passed through a tombstone on the
    # way depends on whether the worker applied the later event before the request or after.)
    changelog = changelog_topic(group_id(topics))
    assert sum(restore_sums(latest_snapshots(topics.bootstrap, changelog)["acme/s-gone"])
               .counts) == 1
