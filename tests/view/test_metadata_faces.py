"""Filters through every face over the metadata scenario: the CLI (local stores and a running
service), the HTTP client and the MCP tools (the filter as an object), each answering what the
Python form of the filter selects, and each refusing a bad filter naming field and operator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstack.cli import main
from memstack.mcp.http import mount_mcp
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.stores.bundle import Stores
from memstack.server.api_keys import ApiKeys
from memstack.server.app import create_app
from memstack.service.client import MemoryService
from memstack.service.types import ServiceError
from tests.mcp.driver import call, fails, over_http
from tests.view.givens import project
from tests.view.metadata_givens import DAYS, KNOWN_MID, METADATA, day, expected, scenario
from tests.view.serving import serve_in_thread

KEY = "metadata-faces-key-1"
SPEC = {"or": [{"tags": {"contains": "food"}}, {"city": "Lisbon"}]}


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory, encoder: MiniLMEncoder) -> Path:
    path = tmp_path_factory.mktemp("metadata-faces") / "stores"
    project(path, scenario(), encoder)
    return path


@pytest.fixture(scope="module")
def url(directory: Path, encoder: MiniLMEncoder) -> Iterator[str]:
    with Stores.open(directory, read_only=True) as stores:
        keys = ApiKeys.parse([f"{KEY}:acme"], "test")
        app = create_app(lambda: stores, keys=keys, encoder=encoder)
        mount_mcp(app, keys.tenants_of)
        with serve_in_thread(app) as base:
            yield base


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["query", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_cli_filters_local_stores_and_the_service(capsys: pytest.CaptureFixture[str],
                                                  directory: Path, url: str) -> None:
    for where in (["--stores", str(directory)], ["--url", url, "--api-key", KEY]):
        records = _cli_json(capsys, "records", "--tenant", "acme", *where,
                            "--filter", json.dumps(SPEC), "--known", KNOWN_MID.isoformat())
        rows = records["records"]
        assert isinstance(rows, list)
        assert {day(r["text"]) for r in rows} == expected(SPEC, range(6))
        assert all(r["metadata"] == METADATA[day(r["text"])] for r in rows)
        hits = _cli_json(capsys, "search", "our trip", "--tenant", "acme", *where, "-k", "24",
                         "--filter", json.dumps(SPEC))["hits"]
        assert isinstance(hits, list)
        assert {day(h["memory"]["text"]) for h in hits} == expected(SPEC, range(DAYS))
    code = main(["query", "records", "--tenant", "acme", "--stores", str(directory),
                 "--filter", '{"stars": {"gte": "many", "lt": true}}'])
    assert code == 2 and "'lt' on 'stars'" in capsys.readouterr().err


def test_http_client_takes_the_filter_as_object_or_text(url: str) -> None:
    with MemoryService(url, api_key=KEY, tenant="acme") as memory:
        hits = memory.search("our trip", 24, filter=SPEC, known=KNOWN_MID).hits
        assert {day(h.memory.text) for h in hits} == expected(SPEC, range(6))
        assert all(h.memory.metadata == METADATA[day(h.memory.text)] for h in hits)
        rows = memory.records(filter=json.dumps({"stars": {"lt": 2}})).records
        assert {day(r.text or "") for r in rows} == expected({"stars": {"lt": 2}}, range(DAYS))
        context = memory.context("our trip", 4000, session="trip1", filter={"city": "Porto"})
        cited = {day(i.text) for i in context.items if "day " in i.text}
        assert cited and cited <= expected({"city": "Porto"}, range(DAYS))
        with pytest.raises(ServiceError) as caught:
            memory.search("trip", filter={"city": {"near": "Porto"}})
        assert caught.value.status == 422 and "'near' on 'city'" in str(caught.value)


def test_mcp_tools_take_the_filter_as_an_object(url: str) -> None:
    async def go() -> None:
        async with over_http(f"{url}/mcp", {"Authorization": f"Bearer {KEY}"}) as session:
            found = await call(session, "search", text="our trip", k=24, filter=SPEC,
                               known=KNOWN_MID.isoformat())
            assert {day(h["memory"]["text"]) for h in found["hits"]} == expected(SPEC, range(6))
            rows = await call(session, "records", filter={"lang": {"in": ["en", "pt"]}})
            assert {day(r["text"]) for r in rows["records"]} == expected(
                {"lang": {"in": ["en", "pt"]}}, range(DAYS))
            refused = await fails(session, "records", filter={"tags": {"contains": 2.5}})
            assert "'contains' on 'tags'" in refused and "422" in refused

    asyncio.run(go())
