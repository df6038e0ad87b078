"""The published contract (memstack.server.contract): the OpenAPI spec alone is enough to write
a client. Every operation lists its error statuses with the problem schema, the event body is
the event schema of schemas/event.v1.json, and the examples are valid events."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from memstack.jobs.service import openapi_app
from memstack.schemas.events import SCHEMA_VERSION, validate_event
from memstack.schemas.wire import load_schema
from memstack.server.contract import FORGET_EXAMPLE, PROBES
from memstack.server.problems import MEDIA_TYPE

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return openapi_app().openapi()


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, item in spec["paths"].items()
            for method, op in item.items()]


def test_every_error_status_declares_the_problem_schema(spec: dict[str, Any]) -> None:
    for method, path, op in operations(spec):
        if path in PROBES:
            assert op["responses"]["503"]["content"]["application/json"]["schema"][
                "required"] == ["status"]
            continue
        for status, response in op["responses"].items():
            if status.startswith(("4", "5")):
                assert response["content"] == {MEDIA_TYPE: {"schema": PROBLEM_REF}}, (
                    method, path, status)
                assert response["description"], (method, path, status)
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_each_operation_lists_its_statuses(spec: dict[str, Any]) -> None:
    read = {"200", "401", "403", "422", "500", "503", "504"}
    want = {
        ("GET", "/healthz"): {"200", "503"},
        ("GET", "/readyz"): {"200", "503"},
        ("GET", "/v1/key"): {"200", "401", "500"},
        ("POST", "/v1/tenants/{tenant}/events"): {"200", "401", "403", "409", "413", "415",
                                                  "422", "500", "503"},
        ("POST", "/v1/tenants/{tenant}/forget"): {"200", "400", "401", "403", "413", "422",
                                                  "500", "503"},
        ("GET", "/v1/tenants/{tenant}/forget/{request_id}"): {"200", "401", "403", "404",
                                                               "422", "500"},
        ("GET", "/v1/tenants/{tenant}/changes"): {"200", "401", "403", "410", "422", "500"},
        ("GET", "/v1/tenants/{tenant}/events/{event_id}"): read | {"404"},
        ("GET", "/v1/tenants/{tenant}/sessions/{session}/state"): read | {"404"},
    }
    for method, path, op in operations(spec):
        expected = want.get((method, path), read)
        assert set(op["responses"]) == expected, (method, path)


def test_the_event_body_is_the_event_schema(spec: dict[str, Any]) -> None:
    """Resolving the spec's Event against its components gives schemas/event.v1.json back."""
    body = spec["paths"]["/v1/tenants/{tenant}/events"]["post"]["requestBody"]
    assert body["required"] is True
    content = body["content"]["application/json"]
    items = content["schema"]["properties"]["events"]["items"]
    assert items == {"$ref": "#/components/schemas/Event"}
    file = load_schema(SCHEMA_VERSION)
    components = spec["components"]["schemas"]
    names = {f"#/$defs/{name}": name if name.startswith("Event") else f"Event{name}"
             for name in file["$defs"]}
    for definition, name in names.items():
        assert _refs_back(components[name], names) == file["$defs"][definition[8:]]
    event = _refs_back(components["Event"], names)
    assert event == {k: v for k, v in file.items() if k not in ("$defs", "$schema", "$id")}
    validator = jsonschema.Draft202012Validator(file)
    for example in content["examples"].values():
        for item in example["value"]["events"]:
            validator.validate(item)
            validate_event(item)


def test_the_forget_scope_is_the_event_schemas(spec: dict[str, Any]) -> None:
    body = spec["components"]["schemas"]["ForgetBody"]
    assert body["properties"]["scope"]["$ref"] == "#/components/schemas/EventForgetScope"
    assert body["examples"] == [FORGET_EXAMPLE]
    file = load_schema(SCHEMA_VERSION)
    scope = {"$defs": file["$defs"], "$ref": "#/$defs/ForgetScope"}
    jsonschema.Draft202012Validator(scope).validate(FORGET_EXAMPLE["scope"])


def _refs_back(node: Any, names: dict[str, str]) -> Any:
    back = {f"#/components/schemas/{name}": ref for ref, name in names.items()}
    if isinstance(node, dict):
        out = {key: _refs_back(value, names) for key, value in node.items()}
        if out.get("$ref") in back:
            out["$ref"] = back[out["$ref"]]
        return out
    if isinstance(node, list):
        return [_refs_back(item, names) for item in node]
    return node
