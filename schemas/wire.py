"""JSON Schema files of the wire format, and the compatibility rule between versions.

``schemas/event.v<N>.json`` is the JSON Schema of envelope version N, generated from the model
and committed, so producers in any language can validate before sending.

Compatibility rule (checked by ``tests/schemas/test_wire.py``): version N+1 may add optional
properties and new event kinds; it may not remove or retype a property, make an optional one
required, or remove a kind. Readers accept every version up to their own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memstack.schemas.events import SCHEMA_VERSION, Event

SCHEMA_DIR = Path(__file__).resolve().parent


def current_schema() -> dict[str, Any]:
    schema = Event.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"memstack.event.v{SCHEMA_VERSION}"
    schema["title"] = f"memstack event envelope, schema_version {SCHEMA_VERSION}"
    return schema


def schema_path(version: int) -> Path:
    return SCHEMA_DIR / f"event.v{version}.json"


def load_schema(version: int) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(schema_path(version).read_text())
    return loaded


def write_current() -> Path:
    path = schema_path(SCHEMA_VERSION)
    path.write_text(json.dumps(current_schema(), indent=2, sort_keys=True) + "\n")
    return path


def compatibility_problems(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Ways in which ``new`` breaks readers or writers of ``old`` (empty when compatible)."""
    problems: list[str] = []
    old_defs = {"$root": old, **old.get("$defs", {})}
    new_defs = {"$root": new, **new.get("$defs", {})}
    for name, old_def in old_defs.items():
        new_def = new_defs.get(name)
        if new_def is None:
            problems.append(f"definition '{name}' was removed")
            continue
        old_props, new_props = old_def.get("properties", {}), new_def.get("properties", {})
        for prop, spec in old_props.items():
            if prop not in new_props:
                problems.append(f"{name}.{prop} was removed")
            elif _shape(spec) != _shape(new_props[prop]):
                problems.append(f"{name}.{prop} changed type")
        added_required = set(new_def.get("required", ())) - set(old_def.get("required", ()))
        problems += [f"{name}.{p} became required" for p in sorted(added_required)]
        old_enum, new_enum = set(old_def.get("enum", ())), set(new_def.get("enum", ()))
        problems += [f"{name} lost value '{v}'" for v in sorted(old_enum - new_enum, key=str)]
    return problems


def _shape(spec: dict[str, Any]) -> Any:
    keep = ("type", "$ref", "format", "items", "additionalProperties")
    return {k: spec[k] for k in keep if k in spec} or sorted(
        json.dumps(x, sort_keys=True) for x in spec.get("anyOf", [])
    )


if __name__ == "__main__":
    print(write_current())
