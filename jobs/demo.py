"""The demo: memory as one live service, used by an agent over HTTP.

1. start ``memstack serve`` (the live worker and the HTTP API in one process);
2. the agent writes a sample conversation over HTTP; the broker acknowledges every event;
3. it reads its own writes at once (``after=`` the write's position): facts as of two valid
   times, as known before the move was mentioned, and a hybrid search;
4. it forgets one observation and reads after the forget's position: the item is gone, and
   the forget's status shows the per-store audit; then the same agent talks MCP (the
   official SDK's client, streamable HTTP at ``/mcp``): a tool call asserts a fact, another
   reads it back with ``after=`` the first one's position;
5. the memory inspector (``/ui``) in a headless Chromium follows the agent's next write over
   the change feed, moves its as-of slider, searches and files a forget until audited;
   screenshots under ``out/ui/`` (skipped, with the reason, when no browser is available);
6. the service stops on SIGTERM and drains.

Libraries stay quiet (their lines go to the service's log); ``-v`` shows the log's tail.
"""

from __future__ import annotations

import logging
import secrets
import signal
import time
from datetime import UTC, datetime
from typing import Any

import httpx

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.settings import Settings
from memstack.jobs.sample import sample_conversation
from memstack.jobs.service import spawn_service
from memstack.schemas.ids import uuid7

log = logging.getLogger(__name__)

TENANT = "demo"


def main(settings: Settings | None = None, verbose: bool = False) -> int:
    settings = settings or Settings.from_env()
    key = "demo-" + secrets.token_urlsafe(16)
    log_path = settings.home / "demo-serve.log"
    settings.home.mkdir(parents=True, exist_ok=True)
    print("1. starting the memory service: the live worker and the HTTP API in one process")
    child, url = spawn_service(settings, log_path, "--within", "0.1",
                               env={"MEMSTACK_API_KEYS": f"{key}:{TENANT}"})
    print(f"   listening on {url} (API docs at {url}/docs; its log: {log_path})")
    try:
        with httpx.Client(base_url=f"{url}/v1/tenants/{TENANT}", timeout=120.0,
                          headers={"Authorization": f"Bearer {key}"}) as agent:
            session = f"demo-{uuid7().hex[:12]}"
            _walkthrough(agent, session)
            _over_mcp(url, key, session)
            _inspector(url, key, agent, session)
    finally:
        child.send_signal(signal.SIGTERM)
        code = child.wait(120)
        if verbose:
            print(log_path.read_text(errors="replace")[-3000:])
    print(f"6. stopped the service with SIGTERM: it drained and exited {code}")
    return code


def _walkthrough(agent: httpx.Client, session: str) -> None:
    builder = EventBuilder(Defaults(tenant=TENANT, agent="planner", source="demo"))
    events = sample_conversation(builder, session)
    print(f"2. the agent writes {len(events)} events of session {session} over HTTP")
    body = _ok(agent.post("/events", json={"events": [e.model_dump(mode="json")
                                                      for e in events]}))
    for event, written in zip(events, body["written"], strict=True):
        print(f"   written {event.kind.value:<14} p{written['partition']}@{written['offset']:<5}"
              f" {(event.text() or '')[:56]}")
    after = body["position"]
    print(f"   the write answers a position token: {after}")

    print("3. it reads its own writes at once, with after=<that token>")
    for valid in ("2026-03-15", "2026-04-15"):
        facts = _ok(agent.get("/facts", params={"after": after, "valid": valid,
                                                 "subject": "user:ana", "relation": "lives_in"}))
        print(f"   where does Ana live, valid {valid}: {_objects(facts)}")
    move = body["written"][7]  # "Ana lives in Porto": known before it = offsets up to it
    cut = f"{move['partition']}:{move['offset']}"
    old = _ok(agent.get("/facts", params={"valid": "2026-04-15", "known": cut,
                                          "subject": "user:ana", "relation": "lives_in"}))
    print(f"   ... as known before the move was mentioned (known={cut}): {_objects(old)}")
    hits = _ok(agent.get("/search", params={"after": after, "text": "does Ana have pets?",
                                             "k": 2, "session": session}))["hits"]
    for hit in hits:
        print(f"   search 'does Ana have pets?' #{hit['rank']}: {hit['memory']['text'][:60]}")

    cat = events[8]  # the observation about the cat
    print(f"4. it forgets one observation ({cat.event_id}): '{cat.text()}'")
    forgot = _ok(agent.post("/forget", json={"scope": {"type": "event",
                                                       "event_id": cat.event_id},
                                             "reason": "the user asked"}))
    print(f"   request {forgot['request_id']}, position {forgot['position']}")
    hits = _ok(agent.get("/search", params={"after": forgot["position"],
                                             "text": "does Ana have pets?", "k": 3,
                                             "session": session}))["hits"]
    gone = all(h["memory"]["event_id"] != cat.event_id for h in hits)
    print(f"   search after the forget: {[h['memory']['text'][:40] for h in hits]}")
    print(f"   the forgotten observation is {'gone' if gone else 'STILL THERE'}")
    status = _ok(agent.get(f"/forget/{forgot['request_id']}"))
    hidden_s = (status.get("phase_seconds") or {}).get("invisible", 0.0)
    print(f"   forget status right after: {status['status']} (hidden +{hidden_s:.2f} s after "
          "it was logged)")
    deadline = time.monotonic() + 120
    while status["status"] != "audited" and time.monotonic() < deadline:
        time.sleep(0.2)
        status = _ok(agent.get(f"/forget/{forgot['request_id']}"))
    audit = status.get("audit") or {}
    seconds = status.get("phase_seconds") or {}
    print(f"   erased +{seconds.get('erased', 0):.2f} s, audited +"
          f"{seconds.get('audited', 0):.2f} s after it was logged")
    print(f"   forget status: {status['status']}; audit "
          f"{'passed' if audit.get('passed') else 'FAILED'} over "
          f"{sorted(audit.get('stores', {}))} and the log (payload key destroyed)")
    if not gone:
        raise SystemExit(1)


def _over_mcp(url: str, key: str, session: str) -> None:
    """The same memory through MCP: a tool call writes, another reads after its position."""
    import asyncio

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def agent() -> tuple[dict[str, Any], dict[str, Any]]:
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http, \
                streamable_http_client(f"{url}/mcp", http_client=http) as (read, write), \
                ClientSession(read, write) as mcp:
            await mcp.initialize()
            wrote = await _tool(mcp, "assert_fact", subject="user:ana", relation="has_pet",
                                object="a cat named Mia", session=session,
                                valid_from="2026-02-01")
            read_back = await _tool(mcp, "facts", subject="user:ana", relation="has_pet",
                                    after=wrote["position"])
            return wrote, read_back

    wrote, read_back = asyncio.run(agent())
    print(f"   the agent also speaks MCP ({url}/mcp): tool assert_fact wrote "
          f"{wrote['event_ids'][0]}, position {wrote['position']}")
    print(f"   tool facts(after=that position): Ana has_pet {_objects(read_back)}")


async def _tool(mcp: Any, name: str, **arguments: Any) -> dict[str, Any]:
    result = await mcp.call_tool(name, arguments)
    if result.is_error or not isinstance(result.structured_content, dict):
        raise SystemExit(f"the MCP tool {name} failed: {result.content}")
    answer: dict[str, Any] = result.structured_content
    return answer


def _inspector(url: str, key: str, agent: httpx.Client, session: str) -> None:
    from memstack.jobs.inspector_tour import (
        BrowserUnavailableError,
        inspector_page,
        shots_dir,
        tour,
    )

    print(f"5. the memory inspector: open {url}/ui/ with the key and tenant '{TENANT}'")
    builder = EventBuilder(Defaults(tenant=TENANT, agent="planner", source="demo"))

    def promotion() -> None:
        event = builder.fact(session, "user:ana", "works_as", "head nurse",
                             valid_from=datetime(2026, 6, 1, tzinfo=UTC))
        _ok(agent.post("/events", json={"events": [event.model_dump(mode="json")]}))
        print("   the agent learns Ana becomes head nurse in June; the open page follows the "
              "change feed and its as-of slider gains a step")

    out = shots_dir()
    try:
        with inspector_page(url, key, TENANT) as page:
            saved = tour(page, "user:ana", promotion, out)
    except BrowserUnavailableError as exc:
        print(f"   screenshots skipped: {exc}")
        return
    print("   slider moved to the first write and back, a search opened a hit's provenance, "
          "and a forget filed from the page was followed until audited")
    print(f"   screenshots: {', '.join(str(p) for p in saved)}")


def _ok(response: httpx.Response) -> Any:
    if response.status_code != 200:
        raise SystemExit(f"the service answered {response.status_code}: {response.text}")
    return response.json()


def _objects(answer: dict[str, Any]) -> list[str]:
    return [f["object"] for f in answer["facts"]]


