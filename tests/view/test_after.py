"""``MemoryView.after``: wait until the stores committed a write's position."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from memstack.pipelines.service.watch import StoresBehindError
from memstack.pipelines.stores.bundle import Stores
from memstack.view import MemoryView
from memstack.view.after import stores_applied
from memstack.view.errors import InvalidQueryError

TOPIC = "t.events"


def test_after_waits_for_the_committed_offsets(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_TOPIC_PREFIX", "t")  # the default applied position's topic
    with Stores.open(tmp_path / "stores") as stores:
        stores.events.apply([], {0: 5}, topic=TOPIC)
        view = MemoryView("acme", stores)
        later = threading.Timer(0.3, stores.events.apply, ([], {0: 9, 1: 2}), {"topic": TOPIC})
        started = time.monotonic()
        later.start()
        assert view.after("e0-8.e1-1", timeout_s=10) is view
        assert 0.2 < time.monotonic() - started < 5
        later.join()
        with pytest.raises(StoresBehindError, match="1 record"):
            view.after("e0-10", timeout_s=0.2, applied=stores_applied(stores, TOPIC))
        with pytest.raises(InvalidQueryError, match="only where the worker runs"):
            view.after("f0-1", timeout_s=0.1)
