"""The point-read lane (memstack.server.point_reads) over HTTP: a held subject's facts and a
held provenance come back as the routes answer them (the same JSON, byte for byte), and every
request it cannot answer exactly (a key it may not use, a parameter it does not know, a time
that does not parse) is answered by the routes as before. Real stores, real uvicorn."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.server import point_reads
from memstack.server.api_keys import ApiKeys
from memstack.server.app import create_app
from memstack.view.points import points_of
from tests.view.serving import served_stores

KEY = "point-lane-key-0001"
ASKS = [
    {"subject": "ana"},
    {"subject": "ana", "relation": "lives_in"},
    {"subject": "ana", "valid": "2024-02-15", "known": "2025-02-20T00:00:00Z"},
    {"subject": "ana", "valid": "2024-01-20", "known": "2025-04-20T00:00:00Z"},
    {"subject": "ana", "valid": "2024-02-15", "known": "0:3"},
    {"subject": "ana", "valid": "2024-01-20", "known": "0:7,1:1"},
    {"subject": "bob", "valid": "2024-03-01", "known": "0:8"},
    {"subject": "nobody"},
]


@pytest.fixture(scope="module")
def client(stores: Stores, encoder: MiniLMEncoder) -> Iterator[httpx.Client]:
    with served_stores(stores, encoder, KEY) as url, httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as opened:
        yield opened


def _scope(path: str, query: str, app: Any, key: str = KEY) -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "query_string": query.encode(),
            "headers": [(b"authorization", f"Bearer {key}".encode())], "app": app}


@pytest.mark.parametrize("ask", ASKS)
def test_held_facts_come_back_as_the_route_answers_them(client: httpx.Client,
                                                        stores: Stores,
                                                        ask: dict[str, str]) -> None:
    first = client.get("/v1/tenants/acme/facts", params=ask)  # the route; the index loads
    assert first.status_code == 200
    events = stores.events
    assert isinstance(events, DuckDBEventIndex)
    assert points_of(events).held("acme", ask["subject"]) is not None
    lane = client.get("/v1/tenants/acme/facts", params=ask)
    routed = client.get("/v1/tenants/acme/facts", params={**ask, "unknown": "1"})  # the route
    assert lane.status_code == routed.status_code == 200
    if "valid" in ask and "known" in ask:  # no "now" inside: the very same bytes
        assert lane.content == routed.content == first.content
    assert lane.json()["facts"] == routed.json()["facts"]
    assert lane.headers["content-type"] == routed.headers["content-type"]


def test_the_lane_answers_held_subjects_itself(client: httpx.Client, stores: Stores) -> None:
    client.get("/v1/tenants/acme/facts", params={"subject": "ana"})  # held
    local = create_app(lambda: stores, keys=ApiKeys.parse([f"{KEY}:acme"], "test"))
    body = point_reads._answer(_scope("/v1/tenants/acme/facts", "subject=ana&valid=2024-02-15"
                                      "&known=2025-03-20T00:00:00Z", local))
    assert body is not None
    assert [f["object"] for f in httpx.Response(200, content=body).json()["facts"]] == ["Braga"]
    for refused in (_scope("/v1/tenants/acme/facts", "subject=ana", local, key="wrong-key-000"),
                    _scope("/v1/tenants/other/facts", "subject=ana", local),
                    _scope("/v1/tenants/acme/facts", "subject=ana&subject=bob", local),
                    _scope("/v1/tenants/acme/facts", "subject=ana&valid=", local),
                    _scope("/v1/tenants/acme/facts", "subject=ana&after=e0-1", local),
                    _scope("/v1/tenants/acme/facts", "relation=lives_in", local)):
        assert point_reads._answer(refused) is None  # the routes answer these


@pytest.mark.parametrize(("params", "headers", "status"), [
    ({"subject": "ana"}, {"Authorization": "Bearer wrong-key-0000"}, 401),
    ({"subject": "ana", "valid": "yesterday-ish"}, {}, 422),
    ({"subject": "ana", "known": "0:99999999999999999999"}, {}, 422),
    ({"subject": "x" * 300}, {}, 422),
])
def test_what_the_lane_cannot_answer_the_routes_refuse_as_before(
        client: httpx.Client, params: dict[str, str], headers: dict[str, str],
        status: int) -> None:
    client.get("/v1/tenants/acme/facts", params={"subject": "ana"})  # held
    r = client.get("/v1/tenants/acme/facts", params=params, headers=headers)
    assert r.status_code == status
    assert r.headers["content-type"] == "application/problem+json"


def test_a_held_provenance_comes_back_as_the_route_answers_it(client: httpx.Client,
                                                              stores: Stores) -> None:
    facts = client.get("/v1/tenants/acme/facts", params={"subject": "ana"}).json()["facts"]
    event_id = facts[0]["source_event_id"]
    first = client.get(f"/v1/tenants/acme/events/{event_id}")
    assert first.status_code == 200
    events = stores.events
    assert isinstance(events, DuckDBEventIndex)
    assert points_of(events).held_provenance("acme", event_id) is not None
    lane = client.get(f"/v1/tenants/acme/events/{event_id}")
    routed = client.get(f"/v1/tenants/acme/events/{event_id}", params={"unknown": "1"})
    assert lane.json() == routed.json() == first.json()
    assert client.get(f"/v1/tenants/other/events/{event_id}").status_code == 403
