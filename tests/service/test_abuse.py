"""Scripted abuse of the real running service: no 5xx, every answer a problem naming the cause.

Each case is a request a hostile or broken client sends (a 10 MB body, invalid UTF-8, deep
JSON, wrong content types, out-of-bound parameters, wrong and foreign keys, path traversal,
null bytes, very long ids) and what the answer's problem document must name: its status, and
a word of its ``field`` or ``detail``. Nothing a case sends may reach the log.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from memstack.pipelines.log_reader import end_offsets
from tests.service.conftest import KEYS, Service, event

pytestmark = pytest.mark.timeout(600)

EVENTS = "/v1/tenants/acme/events"
JSON = {"Content-Type": "application/json"}


def _events(*items: dict[str, Any]) -> bytes:
    return json.dumps({"events": list(items)}).encode()


@dataclass(frozen=True)
class Case:
    name: str
    send: Callable[[httpx.Client], httpx.Response]
    status: int
    names: str
    """A word the problem's field or detail must hold."""


def post(body: bytes, headers: dict[str, str] | None = None,
         path: str = EVENTS) -> Callable[[httpx.Client], httpx.Response]:
    return lambda c: c.post(path, content=body, headers=JSON if headers is None else headers)


def get(path: str, **params: Any) -> Callable[[httpx.Client], httpx.Response]:
    return lambda c: c.get(path, params=params)


def keyed(key: str, path: str = "/v1/tenants/acme/records") -> Callable[
        [httpx.Client], httpx.Response]:
    return lambda c: c.get(path, headers={"Authorization": f"Bearer {key}"})


def _bad_event(**changes: Any) -> bytes:
    return _events({**event("acme", "s-abuse", "x"), **changes})


FORGET_HEAD = b'{"scope": {"type": "session", "session": "s-none"}, "reason": "'

CASES = [
    Case("10 MB body", post(b'{"events": [' + b" " * 10_000_000 + b"]}"), 413, "body"),
    Case("10 MB body, no length", lambda c: c.post(EVENTS, headers=JSON, content=iter(
        [b'{"events": ['] + [b" " * 1_000_000] * 10 + [b"]}"])), 413, "body"),
    Case("invalid UTF-8", post(b'{"events": [{"text": "\xff\xfe\xfd"}]}'), 422, "UTF-8"),
    Case("deep arrays", post(b'{"events": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"), 422,
         "body"),
    Case("deep tool arguments", post(_bad_event(kind="tool_call", payload={
        "tool": "t", "call_id": "c", "arguments": "X"}).replace(
        b'"X"', b'{"a": ' * 100 + b"1" + b"}" * 100)), 422, "nested deeper"),
    Case("event time year 1 east of UTC", post(_bad_event(
        occurred_at="0001-01-01T00:00:00+04:03")), 422, "occurred_at"),
    Case("not JSON", post(b"events=1"), 422, "not JSON"),
    Case("JSON, not an object", post(b"[1, 2]"), 422, "events"),
    Case("text/plain", post(_events(event("acme", "s-abuse", "x")), {
        "Content-Type": "text/plain"}), 415, "content-type"),
    Case("no content type", post(_events(event("acme", "s-abuse", "x")), {}), 415,
         "content-type"),
    Case("multipart", lambda c: c.post(EVENTS, files={"f": b"1"}), 415, "content-type"),
    Case("10 MB forget", post(FORGET_HEAD + b"r" * 10_000_000 + b'"}',
                              path="/v1/tenants/acme/forget"), 413, "body"),
    Case("10 MB forget, no length", lambda c: c.post(
        "/v1/tenants/acme/forget", headers=JSON, content=iter(
            [FORGET_HEAD] + [b"r" * 1_000_000] * 10 + [b'"}'])), 413, "body"),
    Case("10 MB to /mcp", post(b'{"jsonrpc": "2.0", "id": 1, "method": "' + b"m" * 10_000_000
                               + b'"}', path="/mcp"), 413, "body"),
    Case("form to forget", lambda c: c.post("/v1/tenants/acme/forget", data={"a": "1"}), 422,
         "body"),
    Case("k=0", get("/v1/tenants/acme/search", text="x", k=0), 422, "k"),
    Case("k huge", get("/v1/tenants/acme/search", text="x", k=10**12), 422, "k"),
    Case("k not a number", get("/v1/tenants/acme/search", text="x", k="ten"), 422, "k"),
    Case("text too long", get("/v1/tenants/acme/search", text="x" * 20_000), 422, "text"),
    Case("limit huge", get("/v1/tenants/acme/records", limit=10**12), 422, "limit"),
    Case("budget 0", get("/v1/tenants/acme/context", text="x", budget_tokens=0), 422,
         "budget_tokens"),
    Case("known offset huge", get("/v1/tenants/acme/facts", known="0:" + "9" * 40), 422,
         "known"),
    Case("known digits beyond int()", get("/v1/tenants/acme/facts", known="0:" + "9" * 4000),
         422, "known"),
    Case("known too long", get("/v1/tenants/acme/facts", known="0:1," * 2000), 422, "known"),
    Case("valid year 99999", get("/v1/tenants/acme/facts", valid="99999-01-01T00:00:00Z"),
         422, "valid"),
    Case("valid year 1 east of UTC", get("/v1/tenants/acme/facts",
                                         valid="0001-01-01T00:00:00+14:00"), 422, "valid"),
    Case("known year 9999 west of UTC", get("/v1/tenants/acme/records",
                                            known="9999-12-31T23:59:59-14:00"), 422, "known"),
    Case("search as of year 1", get("/v1/tenants/acme/search", text="x", valid="0001-01-01",
                                    known="0001-01-01"), 200, ""),
    Case("records as of 9999", get("/v1/tenants/acme/records", valid="9999-12-31T23:59:59Z",
                                   start="0001-01-01", end="9999-12-31"), 200, ""),
    Case("facts as of year 1", get("/v1/tenants/acme/facts", valid="0001-01-01",
                                   known="0001-01-01"), 200, ""),
    Case("valid garbage", get("/v1/tenants/acme/facts", valid="\u2603"), 422, "valid"),
    Case("start garbage", get("/v1/tenants/acme/records", start="yesterday"), 422, "start"),
    Case("after garbage", get("/v1/tenants/acme/records", after="../../etc"), 422, "after"),
    Case("after offset 30 digits", get("/v1/tenants/acme/records", after="e0-" + "9" * 30),
         422, "after"),
    Case("after unknown partition", get("/v1/tenants/acme/records", after="e4242-1"), 422,
         "after"),
    Case("changes from garbage", get("/v1/tenants/acme/changes", **{"from": "zz"}), 422,
         "from"),
    Case("wrong key", keyed("not-a-key-at-all"), 401, "API key"),
    Case("basic auth", lambda c: c.get("/v1/tenants/acme/records",
                                       headers={"Authorization": "Basic Zm9vOmJhcg=="}), 401,
         "API key"),
    Case("foreign key", keyed(KEYS["other"]), 403, "tenant"),
    Case("read key writes", lambda c: c.post(EVENTS, json={"events": []}, headers={
        "Authorization": f"Bearer {KEYS['acme-read']}"}), 403, "write"),
    Case("foreign tenant in body", post(_events(event("other", "s-abuse", "x"))), 403,
         "tenant"),
    Case("path traversal", get("/v1/tenants/acme/../../../etc/passwd"), 404, "route"),
    Case("encoded traversal", get("/v1/tenants/%2e%2e%2f%2e%2e/records"), 404, "route"),
    Case("ui traversal", get("/ui/..%2f..%2fpyproject.toml"), 404, "Not Found"),
    Case("null byte in subject", get("/v1/tenants/acme/history", subject="a\x00b",
                                     known="0:0"), 200, ""),
    Case("null byte in tenant", get("/v1/tenants/ac%00me/records"), 403, "tenant"),
    Case("null byte in session name", post(_bad_event(session="s\x00x", event_id="1")), 422,
         "event_id"),
    Case("very long event id", post(_bad_event(event_id="0" * 100_000)), 422, "event_id"),
    Case("very long tenant", get("/v1/tenants/" + "a" * 5000 + "/records"), 422, "tenant"),
    Case("very long session", get("/v1/tenants/acme/records", session="s" * 5000), 422,
         "session"),
    Case("very long forget id", get("/v1/tenants/acme/forget/" + "f" * 5000), 422,
         "request_id"),
    Case("unknown forget id", get("/v1/tenants/acme/forget/nope"), 404, "request_id"),
    Case("unknown event", get("/v1/tenants/acme/events/0" * 1), 404, ""),
    Case("wrong method", lambda c: c.delete("/v1/tenants/acme/facts"), 405, "method"),
    Case("unknown route", get("/v2/nothing"), 404, "route"),
    Case("forget without scope", lambda c: c.post("/v1/tenants/acme/forget", json={}), 422,
         "scope"),
    Case("forget of a bad scope", lambda c: c.post("/v1/tenants/acme/forget", json={
        "scope": {"type": "galaxy"}}), 422, "scope"),
    Case("forget, deep JSON", post(b'{"scope": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                                   path="/v1/tenants/acme/forget"), 400, "body"),
    Case("forget, deep scope", post(b'{"scope": {"type": "session", "session": "s", "x": '
                                    + b'{"a": ' * 300 + b"1" + b"}" * 300 + b"}}",
                                    path="/v1/tenants/acme/forget"), 422, ""),
    Case("a forget among events", post(_bad_event(kind="forget_requested", payload={
        "scope": {"type": "session", "session": "s"}})), 422, "kind"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_abuse_is_refused_with_a_problem(service: Service, case: Case) -> None:
    topic = service.settings.events_topic
    before = end_offsets(service.settings.bootstrap, topic)
    with service.client() as client:
        answer = case.send(client)
    assert answer.status_code < 500, (answer.status_code, answer.text[:500])
    assert answer.status_code == case.status, (answer.status_code, answer.text[:500])
    if case.status == 200:
        return
    assert answer.headers["content-type"] == "application/problem+json", answer.text[:300]
    body = answer.json()
    assert body["status"] == case.status and body["title"] and body["detail"], body
    said = f"{body.get('field', '')} {body['detail']}"
    assert case.names.lower() in said.lower(), body
    for word in ("Traceback", "duckdb", "SELECT", "/work/", "site-packages"):
        assert word not in answer.text, answer.text[:500]
    assert end_offsets(service.settings.bootstrap, topic) == before


def test_null_bytes_in_an_event_are_written_and_read_back(service: Service) -> None:
    sent = event("acme", "s-nul\x00x", "a null \x00 byte in the text")
    with service.client() as client:
        written = client.post(EVENTS, json={"events": [sent]})
        assert written.status_code == 200, written.text
        rows = client.get("/v1/tenants/acme/records", params={
            "session": "s-nul\x00x", "after": written.json()["position"]})
        assert rows.status_code == 200, rows.text
        assert [r["text"] for r in rows.json()["records"]] == ["a null \x00 byte in the text"]
        hits = client.get("/v1/tenants/acme/search", params={
            "text": "null \x00 byte", "session": "s-nul\x00x", "k": 3})
        assert hits.status_code == 200, hits.text


def test_the_mcp_endpoint_answers_a_wrong_key_with_the_problem(service: Service) -> None:
    answer = httpx.post(f"{service.url}/mcp", json={
        "jsonrpc": "2.0", "id": 7, "method": "tools/list"},
        headers={"Authorization": "Bearer not-a-key-at-all"})
    assert answer.status_code == 401
    body = answer.json()
    assert body["id"] == 7 and body["error"]["message"].startswith("unauthorized: ")
    assert body["error"]["data"]["status"] == 401


HOSTILE = ["", " ", "\x00", "a" * 300, "-1", "0", "1e309", "NaN", "now", "%", "\\", "*",
           "'; DROP TABLE records;--", "\u202e", "0:0,0:1", "0:-1", " 0 : 1 ", "1:0",
           "0:9223372036854775807", "2147483647:5", "1970-01-01", "2024-13-45", "+inf",
           "0001-01-01T00:00:00Z", "9999-12-31", "user:ana\x00", "bm25", "e0-0"]
READS = {
    "facts": ["valid", "known", "subject", "relation", "after"],
    "history": ["subject", "relation", "valid", "known"],
    "search": ["text", "k", "kind", "session", "subject", "mode", "valid", "known"],
    "records": ["session", "start", "end", "limit", "valid", "known"],
    "context": ["text", "budget_tokens", "session", "subject", "valid", "known"],
    "subjects": ["after"],
}
REQUIRED = {"history": {"subject": "user:ana"}, "search": {"text": "bike"},
            "context": {"text": "bike"}}


def test_every_read_parameter_with_hostile_values(service: Service) -> None:
    """Each read route's every parameter with each hostile value: no 5xx, errors problems."""
    from urllib.parse import quote

    bad = []
    with service.client() as client:
        for route, params in READS.items():
            for param in params:
                for value in HOSTILE:
                    answer = client.get(f"/v1/tenants/acme/{route}",
                                        params={**REQUIRED.get(route, {}), param: value})
                    if answer.status_code >= 500 or (answer.status_code >= 400 and answer.headers[
                            "content-type"] != "application/problem+json"):
                        bad.append((route, param, value[:30], answer.status_code,
                                    answer.text[:200]))
        for route in ("events", "forget"):
            for value in HOSTILE:
                if value.strip():
                    answer = client.get(f"/v1/tenants/acme/{route}/{quote(value, safe='')}")
                    if answer.status_code >= 500:
                        bad.append((route, value[:30], answer.status_code, answer.text[:200]))
    assert not bad, "\n".join(map(str, bad))
