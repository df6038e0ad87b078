"""``memstack emit``: send events from JSON Lines (a file or stdin)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO

from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Event, parse_event


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("emit", help="emit events from JSON Lines (file or stdin)")
    p.add_argument("file", nargs="?", default="-", help="JSONL file, or - for stdin (default)")
    p.add_argument("--skip-invalid", action="store_true",
                   help="send the valid lines even if some are invalid (default: send nothing)")
    p.set_defaults(func=run)


def read_events(stream: IO[str]) -> tuple[list[Event], list[str]]:
    """Parse every line; return the valid events and one error line per invalid input line."""
    events: list[Event] = []
    errors: list[str] = []
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            events.append(parse_event(line.encode()))
        except InvalidEventError as exc:
            errors.append(f"line {number}: {exc}")
    return events, errors


def run(args: argparse.Namespace) -> int:
    from memstack.client import MemoryClient

    if args.file == "-":
        events, errors = read_events(sys.stdin)
    else:
        with open(args.file, encoding="utf-8") as fh:
            events, errors = read_events(fh)
    for line in errors:
        print(line, file=sys.stderr)
    if errors and not args.skip_invalid:
        print(f"{len(errors)} invalid line(s); nothing sent (use --skip-invalid to send the rest)",
              file=sys.stderr)
        return 2
    sent = 0
    from memstack.foundation.settings import Settings
    from memstack.infra.preflight import require_topics

    settings = Settings.from_env()
    require_topics(settings.bootstrap, [settings.events_topic, settings.forget_topic])
    # One client per (tenant, agent) pair is not needed: emit() takes whole events.
    with MemoryClient(tenant="_cli", agent="_cli", settings=settings) as client:
        sent = len(client.emit_confirmed(events))
    print(json.dumps({"sent": sent, "invalid": len(errors)}))
    return 0
