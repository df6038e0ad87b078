"""The Mem0 mapping (pure): stable UUIDv7 ids, times, subjects, refused memories."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from memstack.jobs.mem0 import load_memories, mem0_events, stable_id
from memstack.schemas.ids import is_uuid7, uuid7_millis


def test_stable_ids_are_uuid7_at_the_creation_time_and_repeat() -> None:
    created = datetime(2025, 3, 1, 18, tzinfo=UTC)
    a = stable_id(created, "mem-1", "memory")
    assert is_uuid7(a) and uuid7_millis(a) == int(created.timestamp() * 1000)
    assert a == stable_id(created, "mem-1", "memory")
    assert a != stable_id(created, "mem-2", "memory")


def test_memories_map_to_notes_and_facts() -> None:
    events, errors = mem0_events([
        {"id": "m1", "memory": "likes tea", "agent_id": "bot", "created_at":
         "2025-01-02T03:04:05", "metadata": {"mood": {"x": 1}}},
        {"id": "m2", "memory": " ", "created_at": "2025-01-02T03:04:05Z"},
        {"id": "m3", "memory": "no time"},
        "not an object",
    ], "acme")
    assert [e.kind.value for e in events] == ["note", "fact_asserted"]
    note, fact = events
    assert note.subject == "agent:bot" and note.session == "mem0-bot" and note.agent == "bot"
    assert note.occurred_at == datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)  # naive read as UTC
    assert fact.subject == "mem0:m1" and fact.payload.relation == "metadata.mood"  # type: ignore[union-attr]
    assert fact.payload.object == '{"x": 1}'  # type: ignore[union-attr]
    assert [e.split(":")[0] for e in errors] == ["memory 1", "memory 2", "memory 3"]
    assert "[1].memory" in errors[0] and "[2].created_at" in errors[1]


def test_the_three_file_shapes_load(tmp_path: Path) -> None:
    memory = {"id": "m1", "memory": "x", "created_at": "2025-01-01T00:00:00Z"}
    for name, text in (("obj.json", json.dumps({"results": [memory]})),
                       ("list.json", json.dumps([memory])),
                       ("lines.jsonl", json.dumps(memory) + "\n" + json.dumps(memory))):
        (tmp_path / name).write_text(text)
        assert load_memories(tmp_path / name)[0] == memory
