"""Schemathesis hooks for the live conformance run (``schemathesis.toml`` loads them).

Generated events name random tenants; the service refuses any but the path's with 403 before it
reads further. So that the write path itself is exercised, an events body that has the
documented shape gets the run's tenant in every event; other bodies go as generated.
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    operation = getattr(context, "operation", None)
    path = getattr(operation, "path", "")
    events = body.get("events") if isinstance(body, dict) else None
    if not path.endswith("/events") or not isinstance(events, list):
        return body
    tenant = os.environ["MEMSTACK_CONFORMANCE_TENANT"]
    return {**body, "events": [{**e, "tenant": tenant} if isinstance(e, dict) else e
                               for e in events]}
