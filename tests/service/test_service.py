"""The live service end to end: ``memstack serve`` on a real broker, stores and model.

Writes over HTTP are read back with ``after=``, refused when they cross tenants (403), lack a
key (401), are too large (413) or malformed (422, nothing sent); a retried POST duplicates
nothing; a forget over HTTP is invisible to reads after its position and reports its audit;
the change feed streams what was committed; ``memstack query`` finds the running service.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import pytest

from memstack.jobs.run import worker_env
from memstack.pipelines.log_reader import end_offsets
from tests.service.conftest import KEYS, Service, event, fact

pytestmark = pytest.mark.timeout(600)


def write(client: httpx.Client, tenant: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    response = client.post(f"/v1/tenants/{tenant}/events", json={"events": events})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def records(client: httpx.Client, tenant: str, after: str, **params: Any) -> list[dict[str, Any]]:
    response = client.get(f"/v1/tenants/{tenant}/records", params={"after": after, **params})
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["records"]
    return rows


def test_write_then_read_your_writes(service: Service) -> None:
    with service.client() as client:
        sent = [event("acme", "s-ryw", f"I keep my bike in shed {i}") for i in range(3)]
        sent.append(fact("acme", "user:ana", "lives_in", "Lisbon"))
        body = write(client, "acme", sent)
        assert [w["event_id"] for w in body["written"]] == [e["event_id"] for e in sent]
        assert all(w["offset"] >= 0 and w["log_time"].endswith("Z") for w in body["written"])
        rows = records(client, "acme", body["position"], session="s-ryw")
        assert {r["event_id"] for r in rows} == {e["event_id"] for e in sent[:3]}
        facts = client.get("/v1/tenants/acme/facts", params={
            "after": body["position"], "subject": "user:ana"}).json()["facts"]
        assert [f["object"] for f in facts] == ["Lisbon"]
        hits = client.get("/v1/tenants/acme/search", params={  # other tests share the tenant
            "after": body["position"], "text": "where is the bike", "k": 3,
            "session": "s-ryw"}).json()["hits"]
        assert {h["memory"]["event_id"] for h in hits} == {e["event_id"] for e in sent[:3]}


def test_refusals_send_nothing(service: Service) -> None:
    before = end_offsets(service.settings.bootstrap, service.settings.events_topic)
    good = event("acme", "s-bad", "fine")
    with service.client() as client:
        foreign = client.post("/v1/tenants/acme/events",
                              json={"events": [good, event("other", "s-bad", "not mine")]})
        assert foreign.status_code == 403 and "other" in foreign.text
        malformed = dict(event("acme", "s-bad", "x"), occurred_at="yesterday")
        bad = client.post("/v1/tenants/acme/events", json={"events": [good, malformed]})
        assert bad.status_code == 422 and "events[1].occurred_at" in bad.text, bad.text
        big = client.post("/v1/tenants/acme/events",
                          json={"events": [event("acme", "s-bad", "y" * 5_000_000)]})
        assert big.status_code == 413
        many = client.post("/v1/tenants/acme/events", json={"events": [good] * 1001})
        assert many.status_code == 413
        other_tenant = client.get("/v1/tenants/other/records")
        assert other_tenant.status_code == 403
    assert httpx.get(f"{service.url}/v1/tenants/acme/records").status_code == 401
    with service.client("acme-read") as reader:
        refused = reader.post("/v1/tenants/acme/events", json={"events": [good]})
        assert refused.status_code == 403 and "'write' role" in refused.text
    with service.client("acme-write") as writer:
        assert writer.get("/v1/tenants/acme/records").status_code == 403
        assert writer.post("/v1/tenants/acme/forget", json={
            "scope": {"type": "session", "session": "s-bad"}}).status_code == 403
    assert end_offsets(service.settings.bootstrap, service.settings.events_topic) == before


def test_retried_post_duplicates_nothing(service: Service) -> None:
    sent = [event("acme", "s-retry", f"retry me {i}") for i in range(4)]
    with service.client() as client:
        first = write(client, "acme", sent)
        again = write(client, "acme", [*sent[1:], event("acme", "s-retry", "one more")])
        assert again["written"][:3] == first["written"][1:]  # the first write's offsets
        both = first["position"] + "." + again["position"]
        rows = records(client, "acme", both, session="s-retry")
        assert len(rows) == 5 == len({r["event_id"] for r in rows})
        hits = client.get("/v1/tenants/acme/search", params={
            "after": both, "text": "retry me", "k": 20, "session": "s-retry"}).json()["hits"]
        assert len(hits) == 5 == len({h["memory"]["event_id"] for h in hits})
    ends = end_offsets(service.settings.bootstrap, service.settings.events_topic)
    assert sum(ends.values()) >= 5


def forget_status(client: Any, tenant: str, request_id: str, until: str,
                  timeout_s: float = 60.0) -> dict[str, Any]:
    """The request's status once it reached ``until`` (the eraser works in the background)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status: dict[str, Any] = client.get(f"/v1/tenants/{tenant}/forget/{request_id}").json()
        if status["status"] == until or time.monotonic() > deadline:
            assert status["status"] == until, status
            return status
        time.sleep(0.2)


def test_forget_over_http(service: Service) -> None:
    secret = "my alarm code is 4417"
    with service.client() as client:
        kept = write(client, "acme", [event("acme", "s-keep", "the plants need water")])
        gone = write(client, "acme", [event("acme", "s-gone", secret)])
        assert records(client, "acme", gone["position"], session="s-gone")
        response = client.post("/v1/tenants/acme/forget", json={
            "scope": {"type": "session", "session": "s-gone"}, "reason": "user asked"})
        assert response.status_code == 200, response.text
        forgot = response.json()
        assert records(client, "acme", forgot["position"], session="s-gone") == []
        hits = client.get("/v1/tenants/acme/search", params={
            "after": forgot["position"], "text": "alarm code", "k": 10}).json()["hits"]
        assert all(secret not in h["memory"]["text"] for h in hits)
        assert records(client, "acme", kept["position"], session="s-keep")
        status = forget_status(client, "acme", forgot["request_id"], "audited")
        assert status["audit"]["passed"] is True
        assert set(status["phases"]) == {"logged", "invisible", "erased", "audited"}
        assert 0 <= status["phase_seconds"]["invisible"] <= status["phase_seconds"]["erased"]
        assert client.get(f"/v1/tenants/other/forget/{forgot['request_id']}",
                          headers={"Authorization": f"Bearer {KEYS['other']}"}
                          ).status_code == 404


def test_change_feed_streams_commits(service: Service) -> None:
    got: list[dict[str, Any]] = []
    ready = threading.Event()

    start = httpx.get(f"{service.url}/healthz").json()["applied"]  # follow from here on

    def follow() -> None:
        with service.client() as client, client.stream(
                "GET", "/v1/tenants/acme/changes", params={"from": start},
                timeout=60.0) as stream:
            ready.set()
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    got.append(json.loads(line[6:]))
                    seen = {(c["type"], c.get("object")) for c in got}
                    if {("fact_version_opened", "Braga"), ("fact_version_closed", "Porto")
                        } <= seen:
                        return

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    assert ready.wait(30)
    with service.client() as client, service.client("other") as other:
        write(other, "other", [event("other", "s-feed", "not for acme's feed")])
        first = write(client, "acme", [event("acme", "s-feed", "feed me"),
                                       fact("acme", "user:bo", "lives_in", "Porto")])
        records(client, "acme", first["position"])  # Porto committed: Braga's batch closes it
        write(client, "acme", [fact("acme", "user:bo", "lives_in", "Braga")])
    follower.join(60)
    types = [c["type"] for c in got]
    assert "memory_added" in types and "fact_version_opened" in types, got
    closed = [c for c in got if c["type"] == "fact_version_closed"]
    assert any(c["object"] == "Porto" and c["tt_to"] is not None for c in closed), got
    braga = [c for c in got if c["type"] == "fact_version_opened" and c["object"] == "Braga"]
    assert braga and braga[0]["tt_to"] is None and braga[0]["subject"] == "user:bo"
    assert all(c["tenant"] == "acme" for c in got)
    assert any(c.get("text") == "feed me" for c in got)


def test_query_cli_finds_the_running_service(service: Service) -> None:
    with service.client() as client:
        body = write(client, "acme", [fact("acme", "user:cy", "lives_in", "Faro")])
    env = worker_env(service.settings) | {"MEMSTACK_API_KEY": KEYS["acme"]}
    out = subprocess.run([sys.executable, "-m", "memstack.cli", "query", "facts", "--tenant",
                          "acme", "--subject", "user:cy", "--after", body["position"],
                          "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert [f["object"] for f in json.loads(out.stdout)["facts"]] == ["Faro"]
