"""An ASGI app served by uvicorn on a free loopback port, in a thread, for one test module."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import uvicorn

from memstack.infra.net import free_port_pair

if TYPE_CHECKING:
    from memstack.pipelines.embedding import Encoder
    from memstack.pipelines.stores.bundle import Stores


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Yield the base URL once uvicorn answers; stop the server when the block ends."""
    port = free_port_pair()[0]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def served_stores(stores: Stores, encoder: Encoder, key: str,
                  tenant: str = "acme") -> Iterator[str]:
    """The service app over ``stores``, ``key`` allowed on ``tenant``: its base URL."""
    from memstack.server.api_keys import ApiKeys
    from memstack.server.app import create_app

    app = create_app(lambda: stores, keys=ApiKeys.parse([f"{key}:{tenant}"], "test"),
                     encoder=encoder)
    with serve_in_thread(app) as url:
        yield url
