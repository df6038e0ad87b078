"""The inspector's read routes (``/v1/key``, ``subjects``, ``events/{id}``) on the hand-worked
scenario of :mod:`tests.view.givens` (real projector, DuckDB and LanceDB), and the page's
assets served at ``/ui``. The expected values are worked by hand from the scenario's table."""

from __future__ import annotations

import fnmatch
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.stores.bundle import Stores
from memstack.server.api_keys import ApiKeys
from memstack.server.app import create_app
from memstack.server.inspector import ASSETS
from tests.view.givens import K

ACME = "acme-key-0001"
OTHER = "other-key-0001"
READER = "acme-read-0001"


@pytest.fixture(scope="module")
def client(stores: Stores, encoder: MiniLMEncoder) -> TestClient:
    keys = ApiKeys.from_env({"MEMSTACK_API_KEYS": f"{ACME}:acme,{OTHER}:other,"
                                                  f"{READER}:acme:read"})
    return TestClient(create_app(lambda: stores, keys=keys, encoder=encoder))


def get(client: TestClient, path: str, key: str = ACME, **params: Any) -> Any:
    response = client.get(path, params=params, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    return response.json()


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_key_names_its_tenants_and_roles(client: TestClient) -> None:
    assert get(client, "/v1/key", READER) == {"tenants": ["acme"], "roles": ["read"]}
    assert get(client, "/v1/key", ACME)["roles"] == ["forget", "read", "write"]
    assert client.get("/v1/key").status_code == 401
    assert client.get("/v1/key", headers={"X-API-Key": "nope"}).status_code == 401


def test_subjects_and_known_range(client: TestClient) -> None:
    body = get(client, "/v1/tenants/acme/subjects")
    by = {s["subject"]: s for s in body["subjects"]}
    assert list(by) == ["ana", "bob"]  # by name; the other tenant's ana is not counted
    ana, bob = by["ana"], by["bob"]
    assert (ana["relations"], ana["versions"], ana["current"], ana["records"]) == (1, 6, 3, 4)
    assert (bob["relations"], bob["versions"], bob["current"], bob["records"]) == (1, 1, 1, 1)
    assert when(ana["first_known"]) == K(1, 10) and when(ana["last_known"]) == K(4, 10, 1)
    assert when(bob["first_known"]) == K(2, 5) and when(bob["last_known"]) == K(2, 5, 1)
    assert when(body["known_from"]) == K(1, 10) and when(body["known_to"]) == K(4, 10, 1)
    other = get(client, "/v1/tenants/other/subjects", OTHER)
    assert [(s["subject"], s["versions"]) for s in other["subjects"]] == [("ana", 1)]
    assert client.get("/v1/tenants/other/subjects",
                      headers={"Authorization": f"Bearer {ACME}"}).status_code == 403


def _source(client: TestClient, city: str) -> str:
    versions = get(client, "/v1/tenants/acme/history", subject="ana")["versions"]
    return next(str(v["source_event_id"]) for v in versions if v["object"] == city)


def _cut(versions: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return sorted((v["object"], v["vt_from"][:10], v["vt_to"] and v["vt_to"][:10])
                  for v in versions)


def test_provenance_of_a_fact_event_and_its_lineage(client: TestClient) -> None:
    porto = get(client, f"/v1/tenants/acme/events/{_source(client, 'Porto')}")
    assert porto["kind"] == "fact_asserted" and porto["record"] is None
    assert (porto["log"]["partition"], porto["log"]["offset"]) == (0, 2)
    assert when(porto["log"]["log_time"]) == K(2, 10)
    assert porto["fact"] == {"subject": "ana", "relation": "lives_in", "object": "Porto",
                             "op": "assert", "vt_from": "2024-02-01T00:00:00Z", "vt_to": None}
    # v2 (Lisbon re-cut to end at Feb 1) and v3 (Porto) open at offset 2; v1 closes there
    assert _cut(porto["versions_opened"]) == [("Lisbon", "2024-01-01", "2024-02-01"),
                                              ("Porto", "2024-02-01", None)]
    assert _cut(porto["versions_closed"]) == [("Lisbon", "2024-01-01", None)]
    assert _cut(porto["versions_asserted"]) == [("Porto", "2024-02-01", None)]
    faro = get(client, f"/v1/tenants/acme/events/{_source(client, 'Faro')}")
    assert (faro["log"]["partition"], faro["log"]["offset"]) == (0, 6)
    assert _cut(faro["versions_opened"]) == [("Faro", "2024-01-15", "2024-02-01"),
                                             ("Lisbon", "2024-01-01", "2024-01-15")]
    assert _cut(faro["versions_closed"]) == [("Lisbon", "2024-01-01", "2024-02-01")]
    lisbon = get(client, f"/v1/tenants/acme/events/{_source(client, 'Lisbon')}")
    assert len(lisbon["versions_asserted"]) == 3  # v1, v2 and v5 carry its value


def test_provenance_of_a_record_names_its_memory_row(client: TestClient) -> None:
    note = get(client, "/v1/tenants/acme/records", session="s1")["records"][0]
    body = get(client, f"/v1/tenants/acme/events/{note['event_id']}")
    assert body["kind"] == "note" and body["fact"] is None
    assert body["record"]["text"] == "Ana lives in Lisbon, in a flat near the river"
    assert (body["log"]["partition"], body["log"]["offset"]) == (0, 1)
    assert body["memory"]["event_id"] == note["event_id"]
    assert body["versions_opened"] == body["versions_closed"] == body["versions_asserted"] == []


def test_provenance_refuses_other_tenants_and_unknown_ids(client: TestClient) -> None:
    tokyo = get(client, "/v1/tenants/other/history", OTHER, subject="ana")["versions"][0]
    foreign = client.get(f"/v1/tenants/acme/events/{tokyo['source_event_id']}",
                         headers={"Authorization": f"Bearer {ACME}"})
    assert foreign.status_code == 404 and "no stored event" in foreign.text
    missing = client.get("/v1/tenants/acme/events/0190a0a0-0000-7000-8000-000000000000",
                         headers={"Authorization": f"Bearer {ACME}"})
    assert missing.status_code == 404


def test_the_page_is_served_from_the_package(client: TestClient) -> None:
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
    page = client.get("/ui/")
    assert page.status_code == 200 and 'id="known-slider"' in page.text
    for asset, kind in (("inspector.js", "javascript"), ("api.js", "javascript"),
                        ("timeline.js", "javascript"), ("inspector.css", "css")):
        response = client.get(f"/ui/{asset}")
        assert response.status_code == 200 and kind in response.headers["content-type"]
    assert "http://" not in page.text and "https://" not in page.text  # nothing from a CDN
    assert client.get("/ui/__init__.py").status_code == 404


def test_a_wheel_carries_every_asset() -> None:
    """Every file of the page matches a package-data pattern of pyproject.toml (a wheel built
    from the checkout was checked to list them; this keeps new assets from being left out)."""
    root = Path(__file__).resolve().parents[2]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = data["package-data"]["memstack.server.inspector"]
    files = sorted(p.relative_to(ASSETS.parent).as_posix() for p in ASSETS.iterdir())
    assert {"static/index.html", "static/inspector.js", "static/inspector.css"} <= set(files)
    assert [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)] == []
