"""``memstack query facts|history|search|records|context``: as-of queries from the shell.

Asks the running ``memstack serve`` (found through ``$MEMSTACK_HOME/service.json``, or
``--url``; key from ``--api-key`` or ``$MEMSTACK_API_KEY``), else reads a stores directory
read-only (``--stores``, default ``$MEMSTACK_HOME/stores/live``). ``--after TOKEN`` waits for a
write's position (service only). Prints a table, or the JSON answer with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from memstack.foundation.errors import MemstackError

_HELP = {
    "facts": "fact values valid at --valid as known at --known",
    "history": "every version of a subject's facts, with both intervals",
    "search": "hybrid search (BM25 + vector, fused) with provenance",
    "records": "raw records in log order",
    "context": "a prompt-ready context under a token budget",
}


class RemoteQueryError(MemstackError):
    """The service answered with an error; the message carries its status and detail."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("query", help="as-of queries: facts, history, search, records, context")
    ops = p.add_subparsers(dest="op", metavar="OP")
    ops.required = True
    for op, help_text in _HELP.items():
        q = ops.add_parser(op, help=help_text)
        _common(q)
        _specific(op, q)
        q.set_defaults(func=run)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", required=True)
    p.add_argument("--valid", help="valid time: RFC 3339 (…Z), a date, or now (default)")
    p.add_argument("--known", help="transaction time, or a log position like 0:120,1:98")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--stores", type=Path, help="stores directory (read-only)")
    where.add_argument("--url", help="base URL of a running `memstack serve`")
    p.add_argument("--api-key", help="API key for the service (default $MEMSTACK_API_KEY)")
    p.add_argument("--after", help="a write's position token: answer once it is applied")
    p.add_argument("--json", action="store_true", help="print the JSON answer")


def _specific(op: str, p: argparse.ArgumentParser) -> None:
    if op in ("search", "context"):
        p.add_argument("text", help="the query text")
    if op in ("facts", "history", "search", "context"):
        p.add_argument("--subject", required=op == "history")
    if op in ("facts", "history"):
        p.add_argument("--relation")
    if op in ("search", "records", "context"):
        p.add_argument("--session")
        p.add_argument("--filter", help='metadata filter as JSON, e.g. \'{"topic": "billing", '
                       '"score": {"gte": 3}}\' (docs/queries.md, Filters)')
    if op == "search":
        p.add_argument("-k", type=int, default=10)
        p.add_argument("--kind", action="append", default=[], help="repeatable")
        p.add_argument("--mode", choices=("hybrid", "bm25", "vector"), default="hybrid")
    if op == "records":
        p.add_argument("--start", help="occurred at or after")
        p.add_argument("--end", help="occurred before")
        p.add_argument("--limit", type=int)
    if op == "context":
        p.add_argument("--budget", type=int, default=2000, help="token budget (default 2000)")


def query_of(args: argparse.Namespace) -> Any:
    """The query of the command line, as the operation's parameter model takes it."""
    from memstack.view.ops import Query
    from memstack.view.reads import READS

    get = vars(args).get
    given = {"subject": get("subject"), "relation": get("relation"), "text": get("text"),
             "k": get("k"), "kinds": get("kind") or None, "session": get("session"),
             "mode": get("mode"), "start": get("start"), "end": get("end"),
             "limit": get("limit"), "budget_tokens": get("budget"), "filter": get("filter")}
    taken = READS[args.op].params.model_fields
    return Query(args.op, args.valid, args.known,
                 **{k: v for k, v in given.items() if k in taken and v is not None})


def run(args: argparse.Namespace) -> int:
    query = query_of(args)
    if not args.url and not args.stores:
        from memstack.foundation.settings import Settings
        from memstack.jobs.service.file import find_service

        running = find_service(Settings.from_env())
        args.url = running["url"] if running is not None else None
    if args.after and not args.url:
        raise RemoteQueryError("--after needs the running service (`memstack serve`, or --url)")
    data = _remote(args, query) if args.url else _local(args, query)
    if args.json:
        print(json.dumps(data, ensure_ascii=False))
    else:
        from memstack.view.tables import render

        sys.stdout.write(render(args.op, data))
    return 0


def _local(args: argparse.Namespace, query: Any) -> dict[str, Any]:
    from memstack.foundation.settings import Settings
    from memstack.pipelines.embedding import encoder_kind_for, make_encoder
    from memstack.pipelines.stores.bundle import Stores, stores_dir
    from memstack.view import MemoryView
    from memstack.view.ops import execute, to_json

    directory = args.stores or stores_dir(Settings.from_env())
    encoder = make_encoder(encoder_kind_for(directory))  # loaded only if the query embeds
    with Stores.open(directory, read_only=True) as stores:
        return to_json(execute(MemoryView(args.tenant, stores, encoder=encoder), query))


def _remote(args: argparse.Namespace, query: Any) -> dict[str, Any]:
    import httpx

    key = args.api_key or os.environ.get("MEMSTACK_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = f"{args.url.rstrip('/')}/v1/tenants/{args.tenant}/{args.op}"
    try:
        params = {**query.params_json(), **({"after": args.after} if args.after else {})}
        response = httpx.get(url, params=params, headers=headers, timeout=90.0)
    except httpx.HTTPError as exc:
        raise RemoteQueryError(f"cannot reach {args.url}: {exc}; is `memstack serve` up?") from exc
    if response.status_code == 401:
        raise RemoteQueryError(f"{url} answered 401, no known API key: pass --api-key or set "
                               "MEMSTACK_API_KEY "
                               "(create one with `memstack keys add --tenant T`)")
    if response.status_code != 200:
        raise RemoteQueryError(f"{url} answered {response.status_code}: {response.text}")
    data: dict[str, Any] = response.json()
    return data
