"""The README's Python examples run against the real broker, so the docs cannot rot.

An example that uses ``MemoryService`` runs against ``memstack serve`` started on the test's
topics and home (the client finds it through ``service.json``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memstack.foundation.settings import Settings
from memstack.pipelines.log_reader import read_bounded
from memstack.schemas.sealed import parse_record
from tests.service.conftest import KEYS, running_service

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_an_example() -> None:
    assert python_blocks(), "README.md lost its Python example"


@pytest.mark.parametrize("block", python_blocks())
def test_readme_example_runs(block: str, topics: Settings, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_BOOTSTRAP", topics.bootstrap)
    monkeypatch.setenv("MEMSTACK_TOPIC_PREFIX", topics.topic_prefix)
    monkeypatch.setenv("MEMSTACK_HOME", str(topics.home))
    if "MemoryService" in block:
        monkeypatch.setenv("MEMSTACK_API_KEY", KEYS["acme"])
        with running_service(topics, tmp_path / "serve.log"):
            exec(compile(block, str(README), "exec"), {})
    else:
        exec(compile(block, str(README), "exec"), {})
    events = [parse_record(r.value or b"") for r in read_bounded(topics.bootstrap,
                                                                  topics.events_topic)]
    assert events, "the example emitted nothing"
    assert {e.tenant for e in events} == {"acme"}
