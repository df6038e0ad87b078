"""The MCP server of memstack (official ``mcp`` SDK): memory as tools for any MCP client.

``memstack mcp`` serves it over stdio against a running service; the service mounts the same
server at ``/mcp`` (streamable HTTP), taking the tenant from each request's API key. Tools are
written once over :class:`~memstack.mcp.backend.MemoryBackend`. See docs/mcp.md.

Part of the ``server`` extra: ``pip install 'memstack[server]'`` installs the SDK.
"""
