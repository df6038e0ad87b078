"""A replay over existing stores applies the forgets logged since their last pass.

Found by ``memstack eval faults`` (a killed-and-rerun replay directory): a replay honours the
ledger only for the events it reads, so stores caught up by a later replay kept every event
forgotten since their first pass, readable by anyone who served or switched to them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memstack.client import MemoryClient
from memstack.foundation.settings import Settings
from memstack.jobs.replay import forget_pending, main
from memstack.pipelines.forgetting import ForgetStores
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.errors import StoreError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SECRET = "my locker combination is 31-07-12"


def texts(directory: Path) -> list[str]:
    """Every text in the stores (retried while the replay's Python workers, which outlive the
    job by a moment, still hold the DuckDB file)."""
    deadline = time.monotonic() + 60.0
    while True:
        try:
            with Stores.open(directory, read_only=True) as stores:
                rows = stores.events.records("acme")
                memories = stores.vectors.get([r.event_id for r in rows])
                return [r.text or "" for r in rows] + [m.text for m in memories]
        except StoreError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_catch_up_replay_forgets_what_was_forgotten_since(topics: Settings,
                                                           tmp_path: Path) -> None:
    with MemoryClient("acme", "helper", settings=topics) as client:
        client.note("s1", SECRET)
        client.note("s2", "the standup moved to ten")
        client.flush()
    into = tmp_path / "replay"
    main(start="earliest", stop="end", into=into, settings=topics)  # UDF workers in processes
    assert SECRET in texts(into)

    with MemoryClient("acme", "helper", settings=topics) as client:
        client.forget({"type": "session", "session": "s1"}, reason="asked")
        client.flush()
    main(start="earliest", stop="end", into=into, settings=topics)  # UDF workers in processes
    left = texts(into)
    assert SECRET not in " ".join(left) and "the standup moved to ten" in left
    with ForgetStores(into) as stores:
        assert len(stores.applied()) == 1
    assert forget_pending(topics, into) == []  # applied once, not again
