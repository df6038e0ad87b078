"""``memstack serve``: the live service (worker + HTTP API in one process, see docs/service.md).

``--read-only`` serves a stores directory no one writes (a rebuilt or copied one) without a
worker; ``--openapi PATH`` writes the OpenAPI spec and exits (docs/openapi.json is made so).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memstack.foundation.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_PORT = 8765


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from memstack.jobs.run import add_arguments

    p = sub.add_parser("serve", help="the live service: worker + HTTP API (reads, writes, "
                                     "forgets, change feed)")
    add_arguments(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to listen on (default loopback; 0.0.0.0 exposes it)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (0: any free one)")
    p.add_argument("--after-timeout", type=float, default=30.0,
                   help="seconds a read with after= waits before answering 504 (default 30)")
    p.add_argument("--max-events", type=int, default=1000,
                   help="events per write request at most (default 1000; 413 beyond)")
    p.add_argument("--max-bytes", type=int, default=4 * 1024 * 1024,
                   help="bytes per write request at most (default 4 MiB; 413 beyond)")
    p.add_argument("--read-concurrency", type=int, default=3,
                   help="queries answered at once (default 3; more take cores from ingest)")
    p.add_argument("--search-concurrency", type=int, default=1,
                   help="of those, searches and contexts at once (default 1)")
    p.add_argument("--ready-max-lag", type=int, default=1000, metavar="RECORDS",
                   help="/readyz answers 503 while the stores are more records behind the log "
                        "than this (default 1000)")
    p.add_argument("--readers", type=int, default=0, metavar="N",
                   help="reader processes answering reads over published snapshots, so "
                        "reads take no CPU from the writer's process (default 0: reads run "
                        "in the service's process; docs/service.md, \"Reader processes\")")
    p.add_argument("--read-only", action="store_true",
                   help="no worker: serve reads over --stores, opened read-only")
    p.add_argument("--openapi", type=Path, metavar="PATH",
                   help="write the OpenAPI spec to PATH and exit")
    p.set_defaults(func=run)


def openapi_text() -> str:
    """The service's OpenAPI spec as stable JSON text (what docs/openapi.json holds)."""
    from memstack.jobs.service import openapi_app

    return json.dumps(openapi_app().openapi(), indent=2, sort_keys=True,
                      ensure_ascii=False) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.openapi is not None:
        args.openapi.write_text(openapi_text(), encoding="utf-8")
        print(f"wrote {args.openapi}")
        return 0
    from memstack.foundation.settings import Settings
    from memstack.jobs.run import options_from, quiet_libraries

    quiet_libraries(logging.getLogger().isEnabledFor(logging.DEBUG))
    settings = Settings.from_env()
    if args.read_only:
        return _read_only(args, settings)
    if args.readers < 0:
        raise SystemExit("memstack serve: --readers must be 0 or more")
    from memstack.foundation.errors import MemstackError
    from memstack.jobs.service import ServiceOptions, exit_after, run_service

    options = ServiceOptions(options_from(args), host=args.host, port=args.port,
                             after_timeout_s=args.after_timeout, max_events=args.max_events,
                             max_bytes=args.max_bytes, read_concurrency=args.read_concurrency,
                             search_concurrency=args.search_concurrency,
                             ready_max_lag=args.ready_max_lag, readers=args.readers)
    code = 1
    try:
        code = run_service(settings, options)
    except MemstackError:
        code = 2  # what the CLI answers for it
        raise
    finally:
        exit_after(code)  # the process ends with it, whatever thread is left behind
    return code


def _read_only(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from memstack.jobs.service.listen import HTTP_PARSER
    from memstack.pipelines.stores.bundle import Stores, stores_dir
    from memstack.server.api_keys import LiveApiKeys
    from memstack.server.app import create_app

    keys = LiveApiKeys()  # fails before opening anything when no keys are configured
    directory = args.stores or stores_dir(settings)
    from memstack.pipelines.embedding import encoder_kind_for, make_encoder

    encoder = make_encoder(encoder_kind_for(directory))  # queries embed as the stores were
    with Stores.open(directory, read_only=True) as stores:
        app = create_app(lambda: stores, keys=keys, encoder=encoder)
        log.info("serving %s read-only on http://%s:%d", directory, args.host, args.port)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                    http=HTTP_PARSER)
    return 0
