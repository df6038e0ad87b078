"""The session state kept by the live worker: its durable table, the changelog that backs it, the
items a batch feeds it and the projector that applies them (docs/session-state.md)."""
