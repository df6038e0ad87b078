"""Adapters that plug memstack into agent frameworks (docs/integrations.md).

Each adapter lives in its own module and imports its framework only there:
``memstack.integrations.langgraph`` needs ``langgraph`` (installed by ``memstack[server]``).
"""
