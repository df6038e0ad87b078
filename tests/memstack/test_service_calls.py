"""Pure parts of the HTTP client: configuration, request building, SSE parsing, error mapping."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from memstack.foundation.errors import ConfigError
from memstack.schemas.errors import InvalidEventError
from memstack.service.calls import Calls, parse_sse, time_param
from memstack.service.config import ServiceConfig
from memstack.service.types import (
    InvalidRequestError,
    NotCaughtUpError,
    ServerError,
    WriteReceipt,
    error_for,
)


def test_config_prefers_arguments_then_env_then_service_file(tmp_path: Path) -> None:
    env = {"MEMSTACK_HOME": str(tmp_path), "MEMSTACK_TENANT": "acme", "MEMSTACK_API_KEY": "k" * 8}
    with pytest.raises(ConfigError, match="MEMSTACK_URL"):
        ServiceConfig.resolve(env=env)
    (tmp_path / "service.json").write_text(json.dumps({"url": "http://127.0.0.1:9/", "pid": 1}))
    found = ServiceConfig.resolve(env=env)
    assert (found.url, found.tenant, found.api_key) == ("http://127.0.0.1:9", "acme", "k" * 8)
    assert "k" * 8 not in repr(found)
    given = ServiceConfig.resolve("http://h:1", "key-12345", "t2", env=env)
    assert (given.url, given.tenant) == ("http://h:1", "t2")
    with pytest.raises(ConfigError, match="MEMSTACK_TENANT"):
        ServiceConfig.resolve(env={"MEMSTACK_URL": "http://h:1"})
    (tmp_path / "service.json").write_text("{not json")
    with pytest.raises(ConfigError, match="unreadable"):
        ServiceConfig.resolve(env=env)


def test_calls_carry_times_and_positions_as_the_api_spells_them() -> None:
    calls = Calls(ServiceConfig("http://h", "key", "acme"))
    receipt = WriteReceipt(written=(), position="tok-1")
    call = calls.facts("ana", None, date(2024, 2, 15),
                       datetime(2025, 2, 20, tzinfo=UTC), receipt)
    assert call.path == "/v1/tenants/acme/facts"
    assert call.params == {"valid": "2024-02-15", "known": "2025-02-20T00:00:00.000000Z",
                           "after": "tok-1", "subject": "ana"}
    search = calls.search("x", 3, ["note", "message"], None, None, "bm25", None, "now", None)
    assert search.params == {"known": "now", "text": "x", "k": 3, "kind": ["note", "message"],
                             "mode": "bm25"}
    with pytest.raises(ValueError, match="naive"):
        time_param(datetime(2024, 1, 1))  # noqa: DTZ001  (the point of the test)
    with pytest.raises(InvalidEventError):  # validated before anything would be sent
        calls.write([{"kind": "note", "tenant": "acme"}])
    forget = calls.forget({"type": "session", "session": "s1"}, "asked")
    assert forget.body == {"scope": {"type": "session", "session": "s1"}, "reason": "asked"}


def test_sse_lines_become_changes() -> None:
    lines = [": keep-alive", "id: p1", "event: change", 'data: {"type": "memory_added"}', "",
             "id: p2", "data: plain", "data: text", ""]
    changes = list(parse_sse(iter(lines)))
    assert [(c.id, c.event, c.data) for c in changes] == [
        ("p1", "change", {"type": "memory_added"}), ("p2", None, "plain\ntext")]


def test_status_codes_map_to_typed_errors_naming_the_field() -> None:
    detail = [{"loc": ["body", "events", 0, "payload", "role"], "msg": "Input should be 'user'"}]
    error = error_for(422, detail, "POST /v1/tenants/acme/events")
    assert isinstance(error, InvalidRequestError) and error.status == 422
    assert "events.0.payload.role: Input should be 'user'" in str(error)
    late = error_for(504, {"message": "stores behind", "behind": {"e0": 12}}, "GET x")
    assert isinstance(late, NotCaughtUpError)
    assert "stores behind {'behind': {'e0': 12}}" in str(late)
    assert isinstance(error_for(502, "bad gateway", "GET x"), ServerError)
