"""Hard edges of the service's contract (issue #28), each against the real running service.

Every defect the hostile tester found has a test here that failed on the code before its fix:
a request written in part (a valid event, then a tool call nested 300-980 deep: 500 after the
first event was produced), 5xx from client input (huge ``known=`` offsets, ``after=`` naming
partitions that do not exist waiting the full timeout, unbounded ``limit=``), an event id
reused with other content silently keeping the first, ``POST events`` taking ``text/plain``,
and SIGTERM during a waiting read answering 500. Every answer is a problem document
(``application/problem+json``, docs/service.md).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from memstack.pipelines.log_reader import end_offsets
from tests.conftest import KafkaUnderTest
from tests.service.conftest import (
    Service,
    event,
    fresh_settings,
    start_service,
    stop_service,
)

pytestmark = pytest.mark.timeout(600)

PROBLEM = "application/problem+json"


def problem(response: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    """The answer's problem document, checked: its status, shape and offending field."""
    assert response.status_code == status, (response.status_code, response.text[:500])
    assert response.headers["content-type"] == PROBLEM, response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["type"].startswith("urn:memstack:problem:")
    assert body["title"] and body["detail"], body
    if field is not None:
        assert body.get("field", "").startswith(field), body
    return body


def deep_tool_call_body(depth: int, session: str) -> tuple[bytes, str]:
    """A valid message, then a tool call whose arguments nest ``depth`` objects deep."""
    first = event("acme", session, "the first event of a request refused whole")
    call = {**event("acme", session, "x"), "kind": "tool_call",
            "payload": {"tool": "t", "call_id": "c1", "arguments": "ARGS"}}
    nested = '{"a": ' * depth + "{}" + "}" * depth
    return (json.dumps({"events": [first, call]}).replace('"ARGS"', nested).encode(),
            first["event_id"])


def applied(service: Service) -> str:
    token: str = httpx.get(f"{service.url}/healthz").json()["applied"]
    return token


@pytest.mark.parametrize("depth", [300, 980])
def test_a_deep_tool_call_after_a_valid_event_writes_nothing(service: Service,
                                                              depth: int) -> None:
    """Was: 500, and the first event produced and later readable."""
    topic = service.settings.events_topic
    before = end_offsets(service.settings.bootstrap, topic)
    raw, first_id = deep_tool_call_body(depth, f"s-deep-{depth}")
    with service.client() as client:
        answer = client.post("/v1/tenants/acme/events", content=raw,
                             headers={"Content-Type": "application/json"})
        body = problem(answer, 422)
        assert "events[1]" in body["detail"] or body.get("field") == "body", body
        assert end_offsets(service.settings.bootstrap, topic) == before
        rows = client.get("/v1/tenants/acme/records", params={
            "session": f"s-deep-{depth}", "after": applied(service)}).json()["records"]
        assert first_id not in {r["event_id"] for r in rows}


def test_an_event_id_reused_with_other_content_is_409(service: Service) -> None:
    """Was: 200 with the first write's receipt, the second content silently dropped."""
    first = event("acme", "s-409", "the first content")
    with service.client() as client:
        written = client.post("/v1/tenants/acme/events", json={"events": [first]}).json()
        again = client.post("/v1/tenants/acme/events", json={"events": [first]})
        assert again.status_code == 200 and again.json()["written"] == written["written"]
        before = end_offsets(service.settings.bootstrap, service.settings.events_topic)
        changed = {**first, "payload": {"role": "user", "text": "other content"}}
        fresh = event("acme", "s-409", "new, before the conflicting one")
        refused = client.post("/v1/tenants/acme/events", json={"events": [fresh, changed]})
        body = problem(refused, 409, "events[1].event_id")
        assert first["event_id"] in body["detail"]
        assert end_offsets(service.settings.bootstrap, service.settings.events_topic) == before
        rows = client.get("/v1/tenants/acme/records", params={
            "session": "s-409", "after": written["position"]}).json()["records"]
        assert [r["text"] for r in rows] == ["the first content"]


HUGE = "9" * 30


@pytest.mark.parametrize(("route", "params"), [
    ("facts", {}), ("history", {"subject": "user:ana"}), ("records", {}),
    ("search", {"text": "bike"}), ("context", {"text": "bike"})])
def test_a_huge_known_offset_is_422(service: Service, route: str, params: dict[str, str]) -> None:
    """Was: 500 on search/context, 503 with a SQL fragment on facts/history/records."""
    with service.client() as client:
        for known in (f"0:{HUGE}", f"0:{2**63}", f"{2**31}:1"):
            answer = client.get(f"/v1/tenants/acme/{route}", params={**params, "known": known})
            body = problem(answer, 422)
            assert "known" in body["detail"] and "SELECT" not in answer.text.upper()


def test_after_naming_partitions_that_do_not_exist_is_422_at_once(service: Service) -> None:
    """Was: a wait of the full --after-timeout, then 504."""
    with service.client() as client:
        for token in ("e999-1", "e0-1.f77-3"):
            started = time.monotonic()
            answer = client.get("/v1/tenants/acme/records", params={"after": token})
            assert time.monotonic() - started < 5
            body = problem(answer, 422, "after")
            assert "partition" in body["detail"]


def test_records_limit_is_bounded(service: Service) -> None:
    with service.client() as client:
        problem(client.get("/v1/tenants/acme/records", params={"limit": 10**9}), 422, "limit")
        problem(client.get("/v1/tenants/acme/records", params={"limit": 0}), 422, "limit")


def test_post_events_needs_json(service: Service) -> None:
    """Was: a text/plain body holding JSON written like application/json."""
    before = end_offsets(service.settings.bootstrap, service.settings.events_topic)
    raw = json.dumps({"events": [event("acme", "s-415", "typed wrong")]})
    with service.client() as client:
        for media in ("text/plain", "application/x-www-form-urlencoded",
                      "application/json; charset=latin-1"):
            answer = client.post("/v1/tenants/acme/events", content=raw,
                                 headers={"Content-Type": media})
            problem(answer, 415, "content-type")
    assert end_offsets(service.settings.bootstrap, service.settings.events_topic) == before


def test_sigterm_during_a_waiting_read_answers_503(
        kafka: KafkaUnderTest, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Was: 500 (text/plain) once the server cut the waiting request off."""
    settings = fresh_settings(kafka, tmp_path_factory)
    running = start_service(settings, tmp_path_factory.mktemp("drain") / "serve.log")
    answers: list[httpx.Response] = []

    def wait_for_the_future() -> None:
        with running.client() as client:  # partition 0 exists; offset 10**9 is far ahead
            answers.append(client.get("/v1/tenants/acme/records",
                                      params={"after": "e0-1000000000"}))

    reader = threading.Thread(target=wait_for_the_future)
    try:
        reader.start()
        time.sleep(2.0)  # the read is waiting
    finally:
        code = stop_service(running)
        reader.join(30)
    assert code == 0, running.log_tail()
    assert answers, "the waiting read got no answer"
    body = problem(answers[0], 503)
    assert answers[0].headers.get("retry-after"), answers[0].headers
    assert "stopping" in body["detail"]
