"""``memstack import FILE --url URL``: the export format posted through a running service.

Run twice, the file adds its events once: the service answers a retried event id with its
first write, so the stores hold each event once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from memstack.service.client import MemoryService
from tests.service.conftest import KEYS, Service, event, fact


def test_import_through_the_service_is_idempotent(service: Service, tmp_path: Path) -> None:
    session = f"imp-{uuid.uuid4().hex[:8]}"
    subject = f"user:{uuid.uuid4().hex[:6]}"
    lines = [event("acme", session, f"imported line {i}") for i in range(3)]
    lines.append(fact("acme", subject, "lives_in", "Braga"))
    path = tmp_path / "acme.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = {**os.environ, "MEMSTACK_API_KEY": KEYS["acme"]}
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "memstack.cli", "import", str(path),
                               "--url", service.url], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.strip().splitlines()[-1])["sent"] == 4
    with MemoryService(service.url, KEYS["acme"], tenant="acme") as memory:
        marker = memory.note(session, "marker after the imports")
        records = memory.records(session, after=marker).records
        assert sorted(r.text or "" for r in records) == sorted(
            [f"imported line {i}" for i in range(3)] + ["marker after the imports"])
        assert [f.object for f in memory.facts(subject=subject, after=marker).facts] == ["Braga"]
        assert len(memory.history(subject, after=marker).versions) == 1
