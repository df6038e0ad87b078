"""The MCP read tools answer the scenario's as-of questions, over stdio and over HTTP.

The SDK's own client drives ``memstack mcp`` (stdio, against the read service) and the server
mounted at ``/mcp`` on the read service (streamable HTTP, tenant from the API key).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import ClientSession

from memstack.mcp.http import mount_mcp
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.stores.bundle import Stores
from memstack.server.api_keys import ApiKeys
from memstack.server.app import create_app
from tests.mcp.driver import TOOLS, call, fails, over_http, over_stdio
from tests.view.serving import serve_in_thread

KEY = "mcp-read-key-1"
BOTH = "mcp-both-key-1"


@pytest.fixture(scope="module")
def url(stores: Stores, encoder: MiniLMEncoder) -> Iterator[str]:
    keys = ApiKeys.parse([f"{KEY}:acme", f"{BOTH}:acme", f"{BOTH}:other"], "test")
    app = create_app(lambda: stores, keys=keys, encoder=encoder)
    mount_mcp(app, keys.tenants_of)
    with serve_in_thread(app) as base:
        yield base


async def _ask_the_scenario(session: ClientSession) -> None:
    listed = await session.list_tools()
    assert {t.name for t in listed.tools} >= TOOLS
    now = await call(session, "facts", subject="ana")  # valid defaults to "current"
    assert [f["object"] for f in now["facts"]] == ["Braga"]
    before = await call(session, "facts", subject="ana", valid="2024-02-15",
                        known="2025-02-20T00:00:00Z")
    assert [f["object"] for f in before["facts"]] == ["Porto"]
    history = await call(session, "history", subject="ana", known="0:5")
    assert sorted(v["object"] for v in history["versions"]) == ["Braga", "Lisbon", "Lisbon",
                                                                "Porto"]
    hits = await call(session, "search", text="Faro", k=2, mode="bm25")
    assert "Faro" in hits["hits"][0]["memory"]["text"]
    context = await call(session, "context", text="Where does Ana live?", session="s1",
                         budget_tokens=100)
    assert "ana lives_in Braga" in context["text"]
    assert "RFC 3339" in await fails(session, "facts", valid="soon")
    bounded = await fails(session, "search", text="x", k=5000)  # the service's problem, quoted
    assert "invalid request: k: " in bounded and bounded.endswith("(HTTP 422)"), bounded
    assert "no zone" in await fails(session, "assert_fact", subject="ana", relation="r",
                                    object="o", valid_from="2024-01-01T00:00:00")


def test_read_tools_over_stdio(url: str) -> None:
    async def go() -> None:
        env = {"MEMSTACK_API_KEY": KEY}
        async with over_stdio(env, "--url", url, "--tenant", "acme") as session:
            await _ask_the_scenario(session)

    asyncio.run(go())


def test_read_tools_over_http_take_the_tenant_from_the_key(url: str) -> None:
    async def go() -> None:
        async with over_http(f"{url}/mcp", {"Authorization": f"Bearer {KEY}"}) as session:
            await _ask_the_scenario(session)
        headers = {"X-API-Key": BOTH, "X-Memstack-Tenant": "other"}
        async with over_http(f"{url}/mcp", headers) as session:
            tokyo = await call(session, "facts", subject="ana")
            assert [f["object"] for f in tokyo["facts"]] == ["Tokyo"]
        async with over_http(f"{url}/mcp", {"X-API-Key": BOTH}) as session:
            assert "X-Memstack-Tenant" in await fails(session, "facts")

    asyncio.run(go())


def test_mcp_endpoint_refuses_unknown_keys(url: str) -> None:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for headers in ({}, {"Authorization": "Bearer not-a-known-key"}):
        answer = httpx.post(f"{url}/mcp", json=body, headers=headers)
        assert answer.status_code == 401


def test_a_wrong_key_is_a_clear_error_in_the_sdk_client(url: str) -> None:
    """The SDK client used to show a bare -32603 "Server returned an error response"."""
    from mcp.shared.exceptions import MCPError

    async def go() -> None:
        async with over_http(f"{url}/mcp", {"Authorization": "Bearer wrong-key-0001"}):
            pass

    with pytest.raises(BaseException) as caught:  # the SDK wraps it in task groups
        asyncio.run(go())
    errors = [caught.value]
    while isinstance(errors[-1], BaseExceptionGroup):
        errors.append(errors[-1].exceptions[0])
    error = errors[-1]
    assert isinstance(error, MCPError), repr(error)
    assert error.error.code != -32603
    assert error.error.message.startswith("unauthorized: missing or unknown API key")
    assert error.error.data["status"] == 401
