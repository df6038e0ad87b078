"""``memstack export`` and ``memstack import``: move a tenant's memory between deployments."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from memstack.foundation.errors import ConfigError


def _time(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO time") from exc
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no zone; add Z or +00:00")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    e = sub.add_parser("export", help="a tenant's events from the log as JSONL (forgotten "
                                      "events left out)")
    e.add_argument("--tenant", required=True)
    e.add_argument("--from", dest="start", type=_time, default=None,
                   help="first log (transaction) time, ISO with zone (default: the beginning)")
    e.add_argument("--to", dest="stop", type=_time, default=None,
                   help="log time to stop before, ISO with zone (default: the end now)")
    e.add_argument("-o", "--output", type=Path, default=None,
                   help="JSONL file (default: stdout); written whole or not at all")
    e.set_defaults(func=_export)

    i = sub.add_parser("import", help="re-emit exported events (idempotent by event id), or "
                                      "import a Mem0 export")
    i.add_argument("file", type=Path)
    i.add_argument("--format", choices=["memstack", "mem0"], default="memstack",
                   help="memstack JSONL (default) or Mem0's get_all/export JSON")
    i.add_argument("--tenant", default=None,
                   help="the tenant to import into (required for mem0; re-tenants a "
                        "memstack file)")
    i.add_argument("--url", default=None,
                   help="post through a running service instead of producing to Kafka "
                        "(key: MEMSTACK_API_KEY)")
    i.add_argument("--skip-invalid", action="store_true",
                   help="import the valid events even if some are invalid (default: none)")
    i.set_defaults(func=_import)


def _export(args: argparse.Namespace) -> int:
    from memstack.jobs.export import main

    result = main(args.tenant, args.output, args.start, args.stop)
    print(result.summary(), file=sys.stdout if args.output is not None else sys.stderr)
    return 0


def _import(args: argparse.Namespace) -> int:
    import os

    from memstack.foundation.settings import Settings
    from memstack.jobs.importing import load_events, via_kafka, via_service

    if args.format == "mem0":
        from memstack.jobs.mem0 import load_memories, mem0_events

        if not args.tenant:
            raise ConfigError("--format mem0 needs --tenant (Mem0 exports carry no tenant)")
        events, errors = mem0_events(load_memories(args.file), args.tenant)
    else:
        events, errors = load_events(args.file, args.tenant)
    for line in errors:
        print(line, file=sys.stderr)
    if errors and not args.skip_invalid:
        print(f"{len(errors)} invalid item(s); nothing imported (use --skip-invalid to import "
              "the rest)", file=sys.stderr)
        return 2
    if args.url:
        result = via_service(args.url, os.environ.get("MEMSTACK_API_KEY"), events)
    else:
        result = via_kafka(Settings.from_env(), events)
    print(result.summary())
    return 0
