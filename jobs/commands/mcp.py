"""``memstack mcp``: the MCP server over stdio, against a running memstack service.

An MCP client (an agent, an IDE) starts ``memstack mcp`` and speaks MCP on its stdin/stdout.
The service is ``--url`` (else ``MEMSTACK_URL``, else the running service found through
``$MEMSTACK_HOME/service.json``); the key is ``MEMSTACK_API_KEY`` (never on the command line);
the tenant is ``--tenant`` or ``MEMSTACK_TENANT``. See docs/mcp.md.
"""

from __future__ import annotations

import argparse
import logging
import sys


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("mcp", help="serve memory as MCP tools over stdio (official mcp SDK)")
    p.add_argument("--url", help="the memstack service (default $MEMSTACK_URL or the running "
                                 "service in $MEMSTACK_HOME/service.json)")
    p.add_argument("--tenant", help="the tenant (default $MEMSTACK_TENANT); the API key in "
                                    "$MEMSTACK_API_KEY must be granted it")
    p.add_argument("--agent", default="mcp", help="the agent name written into events")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from memstack.mcp.backend import fixed
    from memstack.mcp.tools import build_server
    from memstack.service.client import AsyncMemoryService

    backend = AsyncMemoryService(args.url, tenant=args.tenant, agent=args.agent,
                                 source="memstack-mcp")
    logging.getLogger("memstack").info("MCP over stdio for tenant %s at %s", backend.tenant,
                                       backend.calls.config.url)
    server = build_server(fixed(backend))
    for handler in logging.getLogger().handlers:  # stdout is the protocol: logs go to stderr
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)
    server.run("stdio")
    return 0
