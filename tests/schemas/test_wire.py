"""Schema files are current, and every version is compatible with the one before."""

from __future__ import annotations

import copy

from memstack.schemas.events import SCHEMA_VERSION
from memstack.schemas.wire import compatibility_problems, current_schema, load_schema


def test_committed_schema_matches_the_model() -> None:
    assert load_schema(SCHEMA_VERSION) == current_schema(), (
        "schemas/event.vN.json is stale: run `python -m memstack.schemas.wire` and commit it"
    )


def test_each_version_is_compatible_with_the_previous() -> None:
    for version in range(2, SCHEMA_VERSION + 1):
        assert compatibility_problems(load_schema(version - 1), load_schema(version)) == []


def test_rule_catches_breaking_changes() -> None:
    old = load_schema(1)
    removed = copy.deepcopy(old)
    del removed["$defs"]["MessagePayload"]["properties"]["text"]
    required = copy.deepcopy(old)
    required["required"].append("subject")
    retyped = copy.deepcopy(old)
    retyped["properties"]["schema_version"]["type"] = "string"
    fewer_kinds = copy.deepcopy(old)
    fewer_kinds["$defs"]["EventKind"]["enum"].remove("note")
    assert "MessagePayload.text was removed" in compatibility_problems(old, removed)
    assert "$root.subject became required" in compatibility_problems(old, required)
    assert "$root.schema_version changed type" in compatibility_problems(old, retyped)
    assert "EventKind lost value 'note'" in compatibility_problems(old, fewer_kinds)


def test_adding_an_optional_field_is_compatible() -> None:
    old = load_schema(1)
    new = copy.deepcopy(old)
    new["properties"]["trace_id"] = {"type": "string"}
    assert compatibility_problems(old, new) == []
