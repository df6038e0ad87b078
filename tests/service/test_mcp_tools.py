"""Every MCP tool, driven by the ``mcp`` SDK's own client against the live service.

Over stdio (``memstack mcp`` finds the service through ``$MEMSTACK_HOME/service.json``) and over
streamable HTTP (the server mounted at ``/mcp`` on the service, tenant from the API key).
Each transport records, asserts, reads its own writes with ``after``, retracts and forgets.
"""

from __future__ import annotations

import asyncio

from mcp import ClientSession
from tests.service.conftest import KEYS, Service

from memstack.jobs.run import worker_env
from tests.mcp.driver import TOOLS, call, fails, over_http, over_stdio


async def every_tool(mcp: ClientSession, tag: str) -> None:
    session, subject = f"s-mcp-{tag}", f"user:mcp-{tag}"
    assert {t.name for t in (await mcp.list_tools()).tools} >= TOOLS
    said = await call(mcp, "record", kind="message", session=session, role="user",
                      text=f"My {tag} umbrella is red", subject=subject)
    seen = await call(mcp, "record", kind="observation", session=session,
                      text=f"the {tag} umbrella hangs by the door")
    await call(mcp, "record", kind="note", session=session, text="remember the umbrella",
               occurred_at="2026-11-30")
    fact = await call(mcp, "assert_fact", subject=subject, relation="lives_in", object="Porto",
                      valid_from="2024-01-01")
    now = await call(mcp, "facts", subject=subject, after=fact["position"])
    assert [f["object"] for f in now["facts"]] == ["Porto"]
    assert (await call(mcp, "facts", subject=subject, valid="2023-06-01",
                       after=fact["position"]))["facts"] == []
    hits = await call(mcp, "search", text=f"{tag} umbrella", k=5, session=session,
                      after=seen["position"])
    assert said["event_ids"][0] in {h["memory"]["event_id"] for h in hits["hits"]}
    context = await call(mcp, "context", text="Where does the user live?", subject=subject,
                         after=fact["position"])
    assert "Porto" in context["text"]
    moved = await call(mcp, "retract_fact", subject=subject, relation="lives_in",
                       valid_from="2025-01-01T00:00:00Z")
    history = await call(mcp, "history", subject=subject, after=moved["position"])
    assert {v["object"] for v in history["versions"]} == {"Porto"}
    assert (await call(mcp, "facts", subject=subject, after=moved["position"]))["facts"] == []
    forgot = await call(mcp, "forget", scope="session", session=session, reason="test")
    assert forgot["request_id"]
    gone = await call(mcp, "search", text=f"{tag} umbrella", k=5, session=session,
                      after=forgot["position"])
    assert gone["hits"] == []
    assert "role" in await fails(mcp, "record", kind="message", session=session,
                                 role="robot", text="beep")


def test_every_tool_over_stdio(service: Service) -> None:
    env = worker_env(service.settings) | {"MEMSTACK_API_KEY": KEYS["acme"],
                                          "MEMSTACK_TENANT": "acme"}

    async def go() -> None:
        async with over_stdio(env) as mcp:  # the URL comes from service.json
            await every_tool(mcp, "stdio")

    asyncio.run(go())


def test_every_tool_over_http(service: Service) -> None:
    async def go() -> None:
        headers = {"Authorization": f"Bearer {KEYS['acme']}"}
        async with over_http(f"{service.url}/mcp", headers) as mcp:
            await every_tool(mcp, "http")
        async with over_http(f"{service.url}/mcp",
                             {"Authorization": f"Bearer {KEYS['acme-read']}"}) as reader:
            assert "403" in await fails(reader, "record", kind="note", session="s",
                                        text="readers cannot write")

    asyncio.run(go())
