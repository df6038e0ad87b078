"""``memstack reindex`` without a running service, then a worker restarted on the result.

The live stores are built by ``memstack run --until-caught-up`` (ONNX int8); the reindex
replays the log with torch up to the live stores' offsets, verifies, and moves
``stores/current``; a later ``memstack run`` (no ``--stores``, no ``MEMSTACK_ENCODER``) opens
the new stores with their recorded encoder and applies a new event there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.jobs.run import worker_env
from memstack.pipelines.embedding import recorded_encoder
from memstack.pipelines.replay.switch import current_stores
from memstack.pipelines.stores.bundle import Stores

pytestmark = pytest.mark.slow


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in worker_env(settings).items() if k != "MEMSTACK_ENCODER"}
    return subprocess.run([sys.executable, "-m", "memstack.cli", *args], capture_output=True,
                          text=True, env=env, timeout=600)


@pytest.mark.timeout(900)
def test_offline_reindex_then_restart(topics: Settings) -> None:
    keys = FileKeyStore(topics.keys_dir)
    with MemoryClient("acme", "bot", settings=topics, keys=keys) as client:
        for i in range(12):
            client.message("s1", "user", f"line {i} about the allotment")
        client.fact("s1", "user:ana", "lives_in", "Porto")
        client.message("s-gone", "user", "forget this one")
        client.forget({"type": "session", "session": "s-gone"})
    os.environ.pop("MEMSTACK_ENCODER", None)
    assert cli(topics, "run", "--until-caught-up", "--within", "0.1").returncode == 0
    live = topics.stores_dir / "live"
    assert recorded_encoder(live) == "all-MiniLM-L6-v2 onnx-int8"

    done = cli(topics, "reindex", "--model", "torch")
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    target = Path(summary["target"])
    assert summary["status"] == "switched" and current_stores(topics) == target
    assert recorded_encoder(target) == "all-MiniLM-L6-v2" and live.exists()
    assert cli(topics, "verify", str(live), str(target)).returncode == 1  # vectors differ
    portable = cli(topics, "verify", str(live), str(target), "--portable", "--no-vectors")
    assert portable.returncode == 0, portable.stdout

    with MemoryClient("acme", "bot", settings=topics, keys=keys) as client:
        new = client.message("s1", "user", "a line after the reindex")
    restarted = cli(topics, "run", "--until-caught-up", "--within", "0.1")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    with Stores.open(target, read_only=True) as stores:
        assert stores.events.record(new.event_id) is not None
        assert stores.events.records("acme", session="s-gone") == []
    with Stores.open(live, read_only=True) as stores:
        assert stores.events.record(new.event_id) is None
