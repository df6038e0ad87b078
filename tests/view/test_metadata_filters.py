"""Metadata on real stores: kept on the rows, returned in answers, and filtered inside DuckDB
(records) and LanceDB (search, both legs and the neighbours: on the rows the metadata index
finds, kept from the rows ranked without it, or as a prefilter), as of a past known time;
over HTTP a bad filter is a 422 naming the field and the operator.

The scenario: tenant ``acme`` writes twelve notes about trips with metadata, one a day in
January 2025 (log time), each valid from its own day in 2024; tenant ``other`` writes notes
with the same metadata (never returned to ``acme``). Every answer is compared with the Python
form of the filter (:func:`memstack.schemas.filters.matches`) over the rows known then.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.stores.bundle import Stores
from memstack.server.api_keys import ApiKeys
from memstack.server.app import create_app
from memstack.view import MemoryView, selective
from memstack.view.errors import InvalidFilterError
from memstack.view.resident.registry import ENV as RESIDENT_ENV
from tests.view.givens import project
from tests.view.metadata_givens import DAYS, KNOWN_MID, METADATA, day, expected, scenario


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, encoder: MiniLMEncoder) -> Iterator[Stores]:
    directory = tmp_path_factory.mktemp("metadata") / "stores"
    project(directory, scenario(), encoder)
    with Stores.open(directory, read_only=True) as opened:
        yield opened


@pytest.fixture
def acme(stores: Stores, encoder: MiniLMEncoder) -> MemoryView:
    return MemoryView("acme", stores, encoder=encoder)


FILTERS: list[dict[str, Any]] = [
    {"city": "Porto"},                                          # eq shorthand
    {"city": {"eq": "Faro"}},
    {"city": {"ne": "Lisbon"}},
    {"city": {"in": ["Braga", "Faro"]}},
    {"city": {"nin": ["Braga", "Faro"]}},
    {"stars": {"gt": 2}},
    {"stars": {"gte": 2.5}},
    {"stars": {"lt": 2}},
    {"stars": {"lte": 1}},
    {"tags": {"contains": "food"}},
    {"tags": {"contains": 3}},
    {"lang": {"eq": "pt"}},
    {"and": [{"tags": {"contains": "beach"}}, {"stars": {"gte": 1}}]},
    {"or": [{"city": "Porto"}, {"lang": "en"}]},
    {"not": {"tags": {"contains": "food"}}},
    {"city": {"ne": "Porto"}, "stars": {"gte": 1, "lt": 4}},
    {"or": [{"and": [{"city": "Lisbon"}, {"not": {"lang": "en"}}]}, {"stars": {"eq": 2.5}}]},
]
IDS = [str(f) for f in FILTERS]


def test_metadata_is_kept_and_returned_as_an_object(acme: MemoryView) -> None:
    records = acme.records()
    assert [r.metadata for r in records] == [METADATA[i] for i in range(DAYS)]
    hits = acme.search("trip to Porto", 3, mode="bm25")
    assert all(h.memory.metadata == METADATA[day(h.memory.text)] for h in hits)


@pytest.mark.parametrize("spec", FILTERS, ids=IDS)
def test_records_filter_in_duckdb_now_and_as_of_a_past_time(acme: MemoryView,
                                                           spec: dict[str, Any]) -> None:
    now = {day(r.text or "") for r in acme.records(filter=spec)}
    assert now == expected(spec, range(DAYS))
    past = {day(r.text or "") for r in acme.as_of(known=KNOWN_MID).records(filter=spec)}
    assert past == expected(spec, range(6))  # a match written after `known` is not returned


@pytest.fixture(params=["resident", "id-first", "broad", "prefilter"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How a search applies its filter (:func:`memstack.view.selective.plan`): its rows ranked
    alone in the resident search index (the default for these few rows), read first from
    LanceDB (no resident index), kept from the rows ranked without it (a broad filter's), or
    as a LanceDB prefilter."""
    if request.param == "id-first":
        monkeypatch.setenv(RESIDENT_ENV, "0")
    if request.param not in ("resident", "id-first"):
        monkeypatch.setattr(selective, "ID_FIRST_MAX", -1)
    if request.param == "broad":
        monkeypatch.setattr(selective, "ID_FIRST_BROAD", 0)
        monkeypatch.setattr(selective, "BROAD_MIN_SHARE", 0.0)
    if request.param == "prefilter":
        monkeypatch.setattr(selective, "BROAD_MIN_SHARE", 2.0)
    return str(request.param)


@pytest.mark.parametrize("mode", ["hybrid", "bm25", "vector"])
@pytest.mark.parametrize("spec", FILTERS, ids=IDS)
def test_search_filter_in_lance_now_and_as_of_a_past_time(acme: MemoryView, spec: dict[str, Any],
                                                          mode: str, path: str) -> None:
    for view, days in ((acme.as_of(), range(DAYS)), (acme.as_of(known=KNOWN_MID), range(6))):
        hits = view.search("our trip: we walked and ate well", DAYS * 2, mode=mode,  # type: ignore[arg-type]
                           filter=spec)
        assert {day(h.memory.text) for h in hits} == expected(spec, days)
        assert all(h.memory.tenant == "acme" for h in hits)


def test_context_keeps_only_rows_that_pass(acme: MemoryView, path: str) -> None:
    spec = {"tags": {"contains": "beach"}}
    context = acme.as_of(known=KNOWN_MID).context("our trip", 4000, session="trip0",
                                                  filter=spec)
    days = {day(i.text) for i in context.items if "day " in i.text}
    assert days and days <= expected(spec, range(6))
    everything = acme.context("our trip", 4000, session="trip0")
    assert {day(i.text) for i in everything.items if "day " in i.text} > days


def test_a_bad_filter_names_field_and_operator(acme: MemoryView) -> None:
    with pytest.raises(InvalidFilterError, match="'gte' on 'stars' needs a number or a string"):
        acme.records(filter={"stars": {"gte": True}})
    with pytest.raises(InvalidFilterError, match="'near' on 'city' is not an operator"):
        acme.search("trip", filter={"city": {"near": "Porto"}})


KEY = "acme-key-0001"


@pytest.fixture(scope="module")
def client(stores: Stores, encoder: MiniLMEncoder) -> TestClient:
    keys = ApiKeys.from_env({"MEMSTACK_API_KEYS": f"{KEY}:acme"})
    return TestClient(create_app(lambda: stores, keys=keys, encoder=encoder))


def test_http_filter_and_metadata_in_answers(client: TestClient) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    spec = '{"city": {"in": ["Braga", "Faro"]}, "stars": {"gte": 2}}'
    for op, params in (("records", {}), ("search", {"text": "our trip", "k": 24})):
        response = client.get(f"/v1/tenants/acme/{op}", headers=headers,
                              params={"filter": spec, "known": KNOWN_MID.isoformat(), **params})
        assert response.status_code == 200, response.text
        rows = (response.json()["records"] if op == "records"
                else [h["memory"] for h in response.json()["hits"]])
        assert {day(r["text"]) for r in rows} == expected(
            {"city": {"in": ["Braga", "Faro"]}, "stars": {"gte": 2}}, range(6))
        assert all(r["metadata"] == METADATA[day(r["text"])] for r in rows)


@pytest.mark.parametrize(("spec", "words"), [
    ('{"stars": {"gte": true}}', ["'gte' on 'stars'", "number"]),
    ('{"city": {"near": "Porto"}}', ["'near' on 'city'", "not an operator"]),
    ('{"tags": ["a"]}', ["'eq' on 'tags'", "contains"]),
    ('{"bad key": 1}', ["'bad key'", "not a metadata key"]),
    ('{"lang": {"in": []}}', ["'in' on 'lang'", "non-empty list"]),
    ("{not json", ["not JSON"]),
])
def test_http_bad_filter_is_422_naming_field_and_operator(client: TestClient, spec: str,
                                                          words: list[str]) -> None:
    response = client.get("/v1/tenants/acme/search", headers={"Authorization": f"Bearer {KEY}"},
                          params={"text": "trip", "filter": spec})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["field"] == "filter"
    assert all(w in body["detail"] for w in words), body["detail"]


def test_a_filter_never_reaches_another_tenant(stores: Stores, encoder: MiniLMEncoder) -> None:
    other = MemoryView("other", stores, encoder=encoder)
    hits = other.search("trip", 24, filter={"city": "Porto"})
    assert hits and all(h.memory.tenant == "other" for h in hits)
    assert {r.tenant for r in other.records(filter={"city": "Porto"})} == {"other"}

