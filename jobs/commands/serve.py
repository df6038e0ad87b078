"""``memstack serve``: the HTTP service over a stores directory no one writes (read-only).

``--openapi PATH`` writes the OpenAPI spec and exits (docs/openapi.json is made this way).
The live worker hosts the same app in-process instead: ``create_app(lambda: stores)``.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_PORT = 8765


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="serve as-of queries over HTTP (FastAPI)")
    p.add_argument("--stores", type=Path,
                   help="stores directory, opened read-only (default $MEMSTACK_HOME/stores/live)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--openapi", type=Path, metavar="PATH",
                   help="write the OpenAPI spec to PATH and exit")
    p.set_defaults(func=run)


def openapi_text() -> str:
    """The service's OpenAPI spec as stable JSON text (what docs/openapi.json holds)."""
    from memstack.pipelines.serve import create_app
    from memstack.view.keys import ApiKeys

    def unused() -> object:
        raise AssertionError("the spec needs no stores")

    app = create_app(unused, keys=ApiKeys(()))  # type: ignore[arg-type]  # never called
    return json.dumps(app.openapi(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.openapi is not None:
        args.openapi.write_text(openapi_text(), encoding="utf-8")
        print(f"wrote {args.openapi}")
        return 0
    import uvicorn

    from memstack.pipelines.serve import create_app
    from memstack.pipelines.stores.bundle import Stores, stores_dir
    from memstack.settings import Settings
    from memstack.view.keys import ApiKeys

    keys = ApiKeys.from_env()  # fail before opening anything when no keys are configured
    directory = args.stores or stores_dir(Settings.from_env())
    with Stores.open(directory, read_only=True) as stores:
        app = create_app(lambda: stores, keys=keys)
        log.info("serving %s on http://%s:%d", directory, args.host, args.port)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
