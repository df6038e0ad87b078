"""Drive memstack's MCP server with the official ``mcp`` SDK client, over stdio or HTTP."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult, TextContent

TOOLS = {"record", "assert_fact", "retract_fact", "search", "facts", "history", "records",
         "context",
         "forget"}


@asynccontextmanager
async def over_stdio(env: dict[str, str], *args: str) -> AsyncIterator[ClientSession]:
    """``memstack mcp ARGS`` as a subprocess, its stdio spoken by the SDK's client."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memstack.cli", "mcp", *args],
        env={**os.environ, **env}, cwd=os.getcwd())
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def over_http(url: str, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    """The SDK's streamable HTTP client at ``url`` (the ``/mcp`` endpoint)."""
    async with create_mcp_http_client(headers=headers) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(mcp: ClientSession, tool: str, /, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; its structured answer."""
    result = await mcp.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {text_of(result)}"
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


async def fails(mcp: ClientSession, tool: str, /, **arguments: Any) -> str:
    """Call a tool that must fail; the error text the client sees."""
    result = await mcp.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    return text_of(result)


def text_of(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))
