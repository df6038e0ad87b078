"""The HTTP service (FastAPI TestClient): as-of answers, API keys, errors, the OpenAPI file."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memstack.jobs.commands.serve import openapi_text
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.stores.bundle import Stores
from memstack.server.api_keys import ApiKeys
from memstack.server.app import create_app
from memstack.view.errors import AuthError

ACME_KEY = "acme-key-0001"
OTHER_KEY = "other-key-0001"
BOTH_KEY = "both-key-00001"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def client(stores: Stores, encoder: MiniLMEncoder) -> TestClient:
    keys = ApiKeys.from_env({"MEMSTACK_API_KEYS": f"{ACME_KEY}:acme,{OTHER_KEY}:other,"
                                                  f"{BOTH_KEY}:acme,{BOTH_KEY}:other"})
    return TestClient(create_app(lambda: stores, keys=keys, encoder=encoder))


def get(client: TestClient, path: str, key: str | None = ACME_KEY, **params: object) -> dict:  # type: ignore[type-arg]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    response = client.get(path, params=params, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize(("valid", "known", "expected"), [
    ("2024-02-15", "2025-02-20T00:00:00Z", ["Porto"]),   # before the correction arrived
    ("2024-02-15", "2025-03-20T00:00:00Z", ["Braga"]),
    ("2024-01-20", "2025-03-20T00:00:00Z", ["Lisbon"]),  # before the late fact was known
    ("2024-01-20", "now", ["Faro"]),
    ("2024-01-10", None, ["Lisbon"]),                    # valid before the late fact
    ("2024-02-15", "0:3", ["Porto"]),                    # a log position
])
def test_facts_as_of(client: TestClient, valid: str, known: str | None,
                     expected: list[str]) -> None:
    params = {"valid": valid, "subject": "ana", "relation": "lives_in"}
    if known is not None:
        params["known"] = known
    body = get(client, "/v1/tenants/acme/facts", **params)
    assert [f["object"] for f in body["facts"]] == expected
    assert body["as_of"]["valid"].startswith(valid)
    if known == "0:3":
        assert body["as_of"]["known_offsets"] == {"0": 3}


def test_history_search_records_context(client: TestClient) -> None:
    history = get(client, "/v1/tenants/acme/history", subject="ana", known="2025-03-20")
    assert len(history["versions"]) == 4
    hits = get(client, "/v1/tenants/acme/search", text="correction Braga not Porto", k=1,
               valid="2024-02-15", known="2025-02-20", kind="note")["hits"]
    assert [h["memory"]["text"] for h in hits] == ["Ana moved to Porto"]
    assert set(hits[0]["score"]) == {"fused", "bm25_rank", "bm25_score", "vector_rank",
                                     "vector_distance", "neighbours"}
    records = get(client, "/v1/tenants/acme/records", session="s1", known="0:4")["records"]
    assert [r["offset"] for r in records] == [1, 3]
    context = get(client, "/v1/tenants/acme/context", text="Where does Ana live?",
                  session="s1", budget_tokens=120)
    assert context["used_tokens"] <= 120
    assert "ana lives_in Braga" in context["text"]
    assert all(i["event_id"] for i in context["items"])


def test_no_key_is_401_and_an_unknown_key_too(client: TestClient) -> None:
    for headers in ({}, {"Authorization": "Bearer nope-nope-nope"}, {"X-API-Key": "wrong-key-1"}):
        response = client.get("/v1/tenants/acme/facts", headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"


def test_a_key_of_another_tenant_is_403(client: TestClient) -> None:
    for path in ("facts", "history?subject=ana", "search?text=Ana", "records",
                 "context?text=Ana"):
        response = client.get(f"/v1/tenants/other/{path}",
                              headers={"Authorization": f"Bearer {ACME_KEY}"})
        assert response.status_code == 403, path
    ok = client.get("/v1/tenants/other/facts", headers={"X-API-Key": OTHER_KEY})
    assert [f["object"] for f in ok.json()["facts"]] == ["Tokyo"]
    both = get(client, "/v1/tenants/other/facts", key=BOTH_KEY)
    assert {f["tenant"] for f in both["facts"]} == {"other"}


def test_bad_input_is_422_with_a_hint(client: TestClient) -> None:
    response = client.get("/v1/tenants/acme/facts", params={"valid": "yesterday"},
                          headers={"Authorization": f"Bearer {ACME_KEY}"})
    assert response.status_code == 422 and "RFC 3339" in response.json()["detail"]
    response = client.get("/v1/tenants/acme/search", params={"text": "x", "k": 0},
                          headers={"Authorization": f"Bearer {ACME_KEY}"})
    assert response.status_code == 422


def test_every_error_is_a_problem_document(client: TestClient) -> None:
    """RFC 9457 problem details for the routes' errors and the framework's own (404, 405,
    422), naming the offending field (memstack.server.problems)."""
    auth = {"Authorization": f"Bearer {ACME_KEY}"}
    cases = [
        (client.get("/v1/tenants/acme/facts"), 401, None),
        (client.get("/v1/tenants/other/facts", headers=auth), 403, None),
        (client.get("/v1/tenants/acme/facts", params={"valid": "yesterday"}, headers=auth),
         422, None),
        (client.get("/v1/tenants/acme/search", params={"text": "x", "k": 0}, headers=auth),
         422, "k"),
        (client.get("/v1/tenants/acme/history", headers=auth), 422, "subject"),
        (client.get("/no/such/route"), 404, None),
        (client.delete("/v1/tenants/acme/facts", headers=auth), 405, None),
    ]
    for response, status, field in cases:
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/problem+json", response.text
        body = response.json()
        assert body["status"] == status and body["type"].startswith("urn:memstack:problem:")
        assert body["title"] and body["detail"], body
        if field is not None:
            assert body["field"] == field and body["errors"][0]["field"] == field, body


def test_unexpected_and_store_errors_leak_nothing(stores: Stores) -> None:
    """An unexpected exception is a 500 problem (was text/plain), a store error a 503 problem
    with Retry-After; neither quotes the SQL, paths or message inside."""
    from memstack.pipelines.stores.errors import StoreError

    app = create_app(lambda: stores, keys=ApiKeys.parse([f"{ACME_KEY}:acme"], "test"))

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("SELECT secret FROM /var/lib/memstack.duckdb")

    @app.get("/store")
    def store() -> None:
        raise StoreError("DuckDB query on /var/lib/memstack.duckdb failed: SELECT secret")

    with TestClient(app, raise_server_exceptions=False) as client:
        for path, status in (("/boom", 500), ("/store", 503)):
            response = client.get(path)
            assert response.status_code == status
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["status"] == status
            assert "SELECT" not in response.text and "duckdb" not in response.text
        assert client.get("/store").headers["retry-after"]


def test_keys_come_from_configuration(tmp_path: Path) -> None:
    with pytest.raises(AuthError, match="MEMSTACK_API_KEYS"):
        ApiKeys.from_env({})
    with pytest.raises(AuthError, match="key:tenant"):
        ApiKeys.from_env({"MEMSTACK_API_KEYS": "justakeywithnotenant"})
    with pytest.raises(AuthError, match="at least"):
        ApiKeys.from_env({"MEMSTACK_API_KEYS": "short:acme"})
    path = tmp_path / "keys"
    path.write_text("# comment\nfile-key-0001:acme\n\nfile-key-0001:beta  # two tenants\n")
    keys = ApiKeys.from_env({"MEMSTACK_API_KEYS_FILE": str(path)})
    assert keys.tenants_of("file-key-0001") == frozenset({"acme", "beta"})
    assert keys.tenants_of("file-key-0002") is None
    assert "file-key" not in repr(keys)


def test_openapi_file_is_current() -> None:
    committed = (ROOT / "docs" / "openapi.json").read_text(encoding="utf-8")
    assert committed == openapi_text(), (
        "docs/openapi.json is stale: run `memstack serve --openapi docs/openapi.json`")


def test_health_needs_no_key(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}

