"""``MemoryService`` / ``AsyncMemoryService`` reads against the real HTTP app over the scenario.

The app is served by uvicorn on a loopback port; answers are parsed into the query layer's
own types, and HTTP errors into typed errors carrying the service's detail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, date, datetime

import pytest

from memstack.infra.net import free_port_pair
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.stores.bundle import Stores
from memstack.service.client import AsyncMemoryService, MemoryService
from memstack.service.types import (
    AuthenticationError,
    InvalidRequestError,
    PermissionDeniedError,
    ServiceUnavailableError,
)
from memstack.view.types import Context, FactsAnswer, SearchAnswer
from tests.view.serving import served_stores

KEY = "client-test-key-1"


@pytest.fixture(scope="module")
def url(stores: Stores, encoder: MiniLMEncoder) -> Iterator[str]:
    with served_stores(stores, encoder, KEY) as url:
        yield url


def test_reads_parse_into_the_query_types(url: str) -> None:
    with MemoryService(url, KEY, tenant="acme") as memory:
        answer = memory.facts("ana", valid=date(2024, 2, 15), known="2025-02-20T00:00:00Z")
        assert isinstance(answer, FactsAnswer)
        assert [f.object for f in answer.facts] == ["Porto"]
        assert answer.facts[0].vt_from == datetime(2024, 2, 1, tzinfo=UTC)
        assert [f.object for f in memory.facts("ana", valid="2024-01-20", known="0:7").facts] \
            == ["Faro"]
        versions = memory.history("ana", "lives_in", known="0:5").versions
        assert sum(v.object == "Porto" for v in versions) == 1 and len(versions) == 4
        hits = memory.search("Faro", k=2, mode="bm25")
        assert isinstance(hits, SearchAnswer) and "Faro" in hits.hits[0].memory.text
        records = memory.records("s1", limit=2).records
        assert [r.offset for r in records] == [1, 3]  # the notes; facts are not records
        context = memory.context("Where does Ana live?", 100, session="s1")
        assert isinstance(context, Context) and "ana lives_in Braga" in context.text


def test_async_reads_match_the_sync_ones(url: str) -> None:
    async def go() -> list[str]:
        async with AsyncMemoryService(url, KEY, tenant="acme") as memory:
            answer = await memory.facts("ana", valid=datetime(2024, 2, 15, tzinfo=UTC),
                                        known="2025-03-20T00:00:00Z")
            return [f.object for f in answer.facts]

    assert asyncio.run(go()) == ["Braga"]


def test_errors_are_typed_and_carry_the_detail(url: str) -> None:
    with MemoryService(url, None, tenant="acme") as memory, \
            pytest.raises(AuthenticationError) as no_key:
        memory.facts()
    assert no_key.value.status == 401 and "API key" in str(no_key.value)
    with MemoryService(url, KEY, tenant="other") as memory, \
            pytest.raises(PermissionDeniedError, match="'other'"):
        memory.facts()
    with MemoryService(url, KEY, tenant="acme") as memory:
        with pytest.raises(InvalidRequestError, match="RFC 3339") as bad:
            memory.facts(valid="soon")
        assert bad.value.status == 422
        with pytest.raises(InvalidRequestError, match="k"):
            memory.search("x", k=0)
        with pytest.raises(ValueError, match="naive"):
            memory.facts(valid=datetime(2024, 1, 1))  # noqa: DTZ001  (the point of the test)


def test_unreachable_service_says_what_to_do() -> None:
    port = free_port_pair()[0]
    with MemoryService(f"http://127.0.0.1:{port}", KEY, tenant="acme") as memory, \
            pytest.raises(ServiceUnavailableError, match="memstack serve"):
        memory.facts()
