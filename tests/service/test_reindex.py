"""``memstack reindex`` against a running service while a reader queries continuously.

A service of its own (the package's shared one keeps its stores): memory written over HTTP,
one session forgotten before the reindex and one while it runs, events written while it runs.
``memstack reindex --model torch`` replays the log with the torch encoder into new stores
(PyFlink), points ``stores/current`` at them and waits for the service, which catches them
up, applies the newer forget, verifies them against its live stores and swaps under its gate.
Throughout, a reader asks facts, search and records: not one query fails. Afterwards the
service answers from the new stores (``encoder.json`` says torch, ``service.json`` names
them), a write after the switch lands in the new stores and not in the old ones (kept).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from memstack.jobs.run import worker_env
from memstack.pipelines.embedding import recorded_encoder
from memstack.pipelines.replay.switch import current_stores
from memstack.pipelines.stores.bundle import Stores
from memstack.service.client import MemoryService
from tests.conftest import KafkaUnderTest
from tests.service.conftest import KEYS, fresh_settings, running_service

pytestmark = pytest.mark.slow

GONE_BEFORE = "my old bank pin is 5512"
GONE_DURING = "the spare key is under the blue pot"


class Reader(threading.Thread):
    """Queries until stopped; counts answers and keeps every failure."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.answers, self.failures = url, threading.Event(), 0, []

    def run(self) -> None:
        with MemoryService(self.url, KEYS["acme"], tenant="acme") as memory:
            while not self.stop.is_set():
                for ask in (lambda: memory.facts(subject="user:ana"),
                            lambda: memory.search("where does Ana live", k=5),
                            lambda: memory.records("s-main", limit=20)):
                    try:
                        ask()
                        self.answers += 1
                    except Exception as exc:  # any failed query fails the test
                        self.failures.append(repr(exc))


class StderrLines(threading.Thread):
    """Collects a child's stderr lines as they come."""

    def __init__(self, child: subprocess.Popen[str]) -> None:
        super().__init__(daemon=True)
        self.child, self.lines = child, []
        self.start()

    def run(self) -> None:
        assert self.child.stderr is not None
        for line in self.child.stderr:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, prefix: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.child.poll() is None:
            if any(line.startswith(prefix) for line in self.lines):
                return True
            time.sleep(0.2)
        return False


@pytest.mark.timeout(900)
def test_reindex_switches_a_running_service_without_a_failed_query(
        kafka: KafkaUnderTest, tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = fresh_settings(kafka, tmp_path_factory)
    log = tmp_path_factory.mktemp("reindex-log") / "serve.log"
    with running_service(settings, log) as service:
        _scenario(service.url, settings, log)


def _scenario(url: str, settings: object, log: Path) -> None:
    info = json.loads((settings.home / "service.json").read_text())  # type: ignore[attr-defined]
    old = Path(info["stores"])
    assert recorded_encoder(old) != "all-MiniLM-L6-v2", "the live stores must not be torch's"
    with MemoryService(url, KEYS["acme"], tenant="acme") as memory:
        for i in range(40):
            memory.message("s-main", "user", f"turn {i}: Ana talks about her garden, day {i}")
        memory.fact("s-main", "user:ana", "lives_in", "Porto")
        memory.message("s-gone", "user", GONE_BEFORE)
        memory.message("s-late", "user", GONE_DURING)
        gone = memory.forget({"type": "session", "session": "s-gone"}, reason="test")
        memory.records("s-gone", after=gone)

        reader = Reader(url)
        reader.start()
        child = subprocess.Popen(
            [sys.executable, "-m", "memstack.cli", "reindex", "--model", "torch"],
            env=worker_env(settings), stdout=subprocess.PIPE,  # type: ignore[arg-type]
            stderr=subprocess.PIPE, text=True)
        err = StderrLines(child)
        assert err.wait_for("replay ", timeout_s=300), err.text()[-3000:]
        # the replay has read the ledger and its end offsets: what follows must be caught up
        # and forgotten by the service at the switch
        late = memory.forget({"type": "session", "session": "s-late"}, reason="test")
        during = []
        while child.poll() is None:
            during.append(memory.message("s-main", "user", f"during the reindex {len(during)}"))
            time.sleep(0.3)
        out = child.stdout.read() if child.stdout else ""
        time.sleep(1.0)  # the reader keeps asking across the swap's aftermath
        reader.stop.set()
        reader.join(timeout=30)
        assert child.returncode == 0, err.text()[-4000:] + log.read_text()[-3000:]
        assert "ETA" in err.text(), "the replay reports progress with an ETA on stderr"
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["status"] == "switched", summary
        assert summary["switch"]["caught_up"] > 0, "writes after the replay's end are caught up"
        assert summary["switch"]["forgets_applied"] >= 1, "the late forget reaches the target"
        assert reader.failures == [], reader.failures[:5]
        assert reader.answers > 20

        target = Path(summary["target"])
        assert recorded_encoder(target) == "all-MiniLM-L6-v2"  # torch, the new model
        info = json.loads((settings.home / "service.json").read_text())  # type: ignore[attr-defined]
        assert info["stores"] == str(target) and info["encoder"] == "all-MiniLM-L6-v2"
        assert info["switch"]["status"] == "switched"
        assert current_stores(settings) == target  # type: ignore[arg-type]

        after = memory.message("s-main", "user", f"after the switch {uuid.uuid4().hex[:6]}")
        seen = memory.records("s-main", limit=5000, after=after).records
        ids = {r.event_id for r in seen}
        assert after.event_ids[0] in ids
        assert all(w.event_ids[0] in ids for w in during)
        for text, receipt in ((GONE_BEFORE, gone), (GONE_DURING, late)):
            hits = memory.search(text, k=20, after=receipt).hits
            assert all(h.memory.text != text for h in hits), text
        assert memory.records("s-late", after=late).records == []
        assert [f.object for f in memory.facts(subject="user:ana").facts] == ["Porto"]

    assert old.exists(), "the old stores are kept until the user removes them"
    with Stores.open(old, read_only=True) as stores:  # closed by the service at the switch
        assert stores.events.record(after.event_ids[0]) is None, "new writes go to the new stores"
