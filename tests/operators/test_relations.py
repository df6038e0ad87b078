"""The relation registry: single-valued by default, multi-valued when declared."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack.operators.relations import RelationConfigError, RelationRegistry


def test_single_valued_by_default_multi_valued_when_declared() -> None:
    registry = RelationRegistry()
    assert registry.is_multi("likes") and registry.is_multi("knows")
    assert not registry.is_multi("lives_in")
    assert not RelationRegistry(frozenset()).is_multi("likes")


def test_loaded_from_a_dict_adds_and_overrides_defaults() -> None:
    registry = RelationRegistry.from_dict({"multi_valued": ["reads"], "single_valued": ["likes"]})
    assert registry.is_multi("reads") and registry.is_multi("knows")
    assert not registry.is_multi("likes")


def test_loaded_from_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "relations.json"
    path.write_text('{"multi_valued": ["tags"]}', encoding="utf-8")
    assert RelationRegistry.from_file(path, base=RelationRegistry(frozenset())).multi_valued == {
        "tags"}


@pytest.mark.parametrize("data, message", [
    ({"multi": ["x"]}, "unknown keys"),
    ({"multi_valued": "likes"}, "must be a list"),
    ({"multi_valued": ["x"], "single_valued": ["x"]}, "both"),
])
def test_a_bad_config_says_what_is_wrong(data: dict[str, object], message: str) -> None:
    with pytest.raises(RelationConfigError, match=message):
        RelationRegistry.from_dict(data)


def test_a_bad_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("[1]", encoding="utf-8")
    with pytest.raises(RelationConfigError, match=r"bad\.json"):
        RelationRegistry.from_file(path)
