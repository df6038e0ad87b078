"""The clients of the live service (``memstack serve``, the package's shared one).

``MemoryService`` / ``AsyncMemoryService``: writes built by the shared event builder are read
back with ``after=`` the receipt; refusals arrive as typed errors with the service's detail; a
forget hides the session from reads after its position; the change feed yields a write's commits.

MCP: every tool, driven by the ``mcp`` SDK's own client over stdio (``memstack mcp`` finds the
service through ``$MEMSTACK_HOME/service.json``) and over streamable HTTP (the server mounted at
``/mcp``, tenant from the API key). Each transport records, asserts, reads its own writes with
``after``, retracts and forgets.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from mcp import ClientSession

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.jobs.run import worker_env
from memstack.schemas.errors import InvalidEventError
from memstack.service.client import AsyncMemoryService, MemoryService
from memstack.service.types import (
    AuthenticationError,
    Change,
    ConflictError,
    ForgetReceipt,
    InvalidRequestError,
    PayloadTooLargeError,
    PermissionDeniedError,
    WriteReceipt,
)
from tests.mcp.driver import TOOLS, call, fails, over_http, over_stdio
from tests.service.conftest import KEYS, Service


def test_writes_are_read_back_after_their_receipt(service: Service) -> None:
    with MemoryService(service.url, KEYS["acme"], tenant="acme", agent="sdk") as memory:
        said = memory.message("s-sdk", "user", "I keep my bike in the shed", subject="user:ana")
        assert isinstance(said, WriteReceipt) and len(said.written) == 1
        owns = memory.fact("s-sdk", "user:ana", "owns", "bike")
        rows = memory.records("s-sdk", after=said).records
        assert [r.event_id for r in rows] == said.event_ids and rows[0].agent == "sdk"
        assert [f.object for f in memory.facts("user:ana", "owns", after=owns).facts] == ["bike"]
        hits = memory.search("bike shed", k=3, session="s-sdk", after=owns.position).hits
        assert hits[0].event_id == said.event_ids[0]
        batch = memory.emit_many([memory.events.note("s-sdk", f"note {i}") for i in range(3)])
        assert len(batch.written) == 3
        assert len(memory.records("s-sdk", after=batch).records) == 4
        gone = memory.retract("s-sdk", "user:ana", "owns", "bike")
        assert memory.facts("user:ana", "owns", after=gone).facts == []


def test_refusals_are_typed_errors_with_the_detail(service: Service) -> None:
    other = EventBuilder(Defaults("other", "sdk"))
    with MemoryService(service.url, KEYS["acme"], tenant="acme") as memory:
        with pytest.raises(PermissionDeniedError) as crossed:
            memory.emit(other.note("s1", "not mine"))
        assert crossed.value.status == 403
        with pytest.raises(InvalidEventError):  # caught before anything is sent
            memory.message("s1", "robot", "beep")
        with pytest.raises(PayloadTooLargeError):
            memory.emit_many([memory.events.note("s-big", "x")] * 1001)
    with MemoryService(service.url, KEYS["acme-read"], tenant="acme") as reader, \
            pytest.raises(PermissionDeniedError):
        reader.note("s1", "readers cannot write")
    with MemoryService(service.url, "not-a-key-000", tenant="acme") as stranger, \
            pytest.raises(AuthenticationError):
        stranger.facts()


def test_a_reused_event_id_is_a_conflict_error(service: Service) -> None:
    with MemoryService(service.url, KEYS["acme"], tenant="acme") as memory:
        first = memory.events.note("s-conflict", "the first content")
        memory.emit(first)
        memory.emit(first)  # a retry: answered from the first write
        with pytest.raises(ConflictError) as conflict:
            memory.emit(first.model_copy(update={"session": "s-elsewhere"}))
        assert conflict.value.status == 409 and first.event_id in str(conflict.value)
        with pytest.raises(InvalidRequestError) as bounded:
            memory.records("s-conflict", limit=10**6)
        assert "limit" in str(bounded.value)


def test_forget_hides_the_session_after_its_position(service: Service) -> None:
    with MemoryService(service.url, KEYS["acme"], tenant="acme") as memory:
        kept = memory.note("s-forget", "the alarm code is 4711")
        assert memory.records("s-forget", after=kept).records
        receipt = memory.forget({"type": "session", "session": "s-forget"}, reason="asked")
        assert isinstance(receipt, ForgetReceipt)
        assert memory.records("s-forget", after=receipt).records == []
        assert memory.forget_status(receipt.request_id).status in ("invisible", "erased",
                                                                    "audited")


def test_async_service_round_trip(service: Service) -> None:
    async def go() -> list[str]:
        async with AsyncMemoryService(service.url, KEYS["acme"], tenant="acme") as memory:
            receipt = await memory.observation("s-async", "the printer is out of toner")
            answer = await memory.records("s-async", after=receipt)
            return [r.text or "" for r in answer.records]

    assert asyncio.run(go()) == ["the printer is out of toner"]


def test_change_feed_yields_the_commits_of_a_write(service: Service) -> None:
    got: list[Change] = []
    with MemoryService(service.url, KEYS["acme"], tenant="acme") as memory:
        start = memory.note("s-feed-sdk", "before the feed")

        def follow() -> None:
            with MemoryService(service.url, KEYS["acme"], tenant="acme") as reader:
                for change in reader.changes(since=start):
                    got.append(change)
                    if isinstance(change.data, dict) and change.data.get("text") == "fed":
                        return

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        memory.note("s-feed-sdk", "fed")
        follower.join(60)
    assert any(isinstance(c.data, dict) and c.data.get("text") == "fed" for c in got), got
    assert all(c.id for c in got)


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
    notes = await call(mcp, "search", text=f"{tag} umbrella", k=5, session=session,
                       kinds=["observation"], after=seen["position"])
    assert {h["memory"]["event_id"] for h in notes["hits"]} == set(seen["event_ids"])
    logged = await call(mcp, "records", session=session, limit=2, after=seen["position"])
    assert [r["event_id"] for r in logged["records"]] == said["event_ids"] + seen["event_ids"]
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
