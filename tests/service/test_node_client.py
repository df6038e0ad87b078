"""docs/examples/node_client.mjs, the Node client docs/service.md quotes, run with Node against
the live service: it writes a fact, reads it back ``after=`` the write, forgets the subject and
reads again after the forget (nothing left). The docs' quote must be the file itself."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from memstack.schemas.ids import uuid7
from tests.service.conftest import KEYS, Service

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "node_client.mjs"


def test_the_docs_quote_the_example_file() -> None:
    docs = (ROOT / "docs" / "service.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```js\n(.*?)```", docs, flags=re.S)
    assert EXAMPLE.read_text(encoding="utf-8") in blocks, (
        "docs/service.md must quote docs/examples/node_client.mjs whole in a ```js block")


def test_node_client_reads_its_write_and_not_what_it_forgot(service: Service) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the Node client example needs Node >= 18")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    if int(version.stdout.strip().lstrip("v").split(".")[0]) < 18:
        pytest.skip(f"node {version.stdout.strip()} has no fetch; the example needs Node >= 18")
    subject = f"user:node-{uuid7()}"
    env = {**os.environ, "MEMSTACK_URL": service.url, "MEMSTACK_API_KEY": KEYS["acme"],
           "MEMSTACK_TENANT": "acme"}
    run = subprocess.run([node, str(EXAMPLE), subject], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr + service.log_tail()
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    assert figures == {"before": ["Porto"], "after": []}, run.stdout
