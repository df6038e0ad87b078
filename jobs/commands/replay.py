"""``memstack replay``, ``memstack verify`` and ``memstack stores switch``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("replay", help="rebuild stores from the log with PyFlink")
    p.add_argument("--from", dest="start", default="earliest",
                   help="earliest | ISO time with zone | offsets P:O,P:O (default earliest)")
    p.add_argument("--to", dest="stop", default="end",
                   help="end (offsets now) | ISO time | offsets P:O,P:O (default end)")
    p.add_argument("--into", type=Path, required=True,
                   help="stores directory: new (fresh rebuild) or existing (caught up)")
    p.add_argument("--parallelism", type=int, default=os.cpu_count() or 1,
                   help="prepare/embed subtasks, each with cores/N torch threads (default: the "
                        "cores, %(default)s here; measured faster than 1 on 2 cores)")
    p.add_argument("--embed-batch", type=int, default=1024,
                   help="texts per model call (default 1024: the model sorts a call by length)")
    p.add_argument("--prepare-key", choices=["record", "session"], default="record",
                   help="spread the prepare stage by record (even load, default) or by session; "
                        "the writer restores each partition's log order either way")
    p.add_argument("--worker-mode", choices=["process", "loopback"], default="process",
                   help="Python UDF workers as processes (default) or threads of this process")
    p.add_argument("--flink", metavar="HOST:PORT", default=None,
                   help="submit to a standalone Flink cluster at this REST address (`memstack "
                        "infra flink up` starts one) instead of the local mini-cluster")
    p.add_argument("--service", metavar="URL", default=os.environ.get("MEMSTACK_REPLAY_SERVICE"),
                   help="run the job on a warm replay service (`memstack replay-service` "
                        "prints its URL; env MEMSTACK_REPLAY_SERVICE): its start-up is paid")
    p.add_argument("--send-dead-letters", action="store_true",
                   help="send dead letters to the DLQ (live already did for the same records)")
    p.add_argument("--ignore-forget", action="store_true",
                   help="do not honour the forget ledger (for audits only)")
    p.set_defaults(func=_replay)

    r = sub.add_parser("replay-service",
                       help="a long-lived process that runs replay jobs warm (JVM, Flink, model)")
    r.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    r.add_argument("--port", type=int, default=8766,
                   help="port (default %(default)s; 0: any free one, printed when ready)")
    r.add_argument("--parallelism", type=int, default=os.cpu_count() or 1,
                   help="parallelism warmed up for (default: the cores, %(default)s here)")
    r.add_argument("--work-dir", type=Path, default=None,
                   help="Flink's logs and temp files (default: MEMSTACK_HOME/replay-service)")
    r.set_defaults(func=_replay_service)

    v = sub.add_parser("verify", help="compare the content hashes of two stores directories")
    v.add_argument("a", type=Path)
    v.add_argument("b", type=Path)
    v.add_argument("--json", action="store_true", help="print JSON")
    v.add_argument("--portable", action="store_true",
                   help="compare what survives a move between logs (no log positions or "
                        "transaction times; current facts): an import, a re-embedding")
    v.add_argument("--tenant", default=None, help="with --portable: one tenant's rows only")
    v.add_argument("--no-vectors", action="store_true",
                   help="with --portable: leave vectors out (stores of another encoder)")
    v.set_defaults(func=_verify)

    s = sub.add_parser("stores", help="which stores readers serve from")
    ss = s.add_subparsers(dest="stores_command", metavar="ACTION")
    ss.required = True
    sw = ss.add_parser("switch", help="serve from DIR (atomic pointer stores/current)")
    sw.add_argument("dir", type=Path)
    sw.set_defaults(func=_switch)
    cur = ss.add_parser("current", help="print the stores directory readers serve from")
    cur.set_defaults(func=_current)


def _replay(args: argparse.Namespace) -> int:
    from memstack.jobs.replay import main, summary

    if args.service:
        return _replay_on_service(args)
    result = main(start=args.start, stop=args.stop, into=args.into,
                  parallelism=args.parallelism, worker_mode=args.worker_mode,
                  send_dead_letters=args.send_dead_letters,
                  honour_forget=not args.ignore_forget, embed_batch=args.embed_batch,
                  prepare_key=args.prepare_key, flink=args.flink)
    print(summary(result))
    return 0


def _replay_on_service(args: argparse.Namespace) -> int:
    import json

    from memstack.jobs.replay_service.client import print_lines, submit
    from memstack.jobs.replay_service.request import ReplayRequest

    if args.flink or args.worker_mode != "process":
        raise SystemExit("--service runs the job in the service's own workers: leave out "
                         "--flink and --worker-mode")
    request = ReplayRequest.model_validate({
        "into": str(args.into.resolve()), "from": args.start, "to": args.stop,
        "parallelism": args.parallelism, "embed_batch": args.embed_batch,
        "prepare_key": args.prepare_key, "send_dead_letters": args.send_dead_letters,
        "honour_forget": not args.ignore_forget})
    print(json.dumps(submit(args.service, request, print_lines())))
    return 0


def _replay_service(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.jobs.replay_service.server import serve

    settings = Settings.from_env()
    return serve(settings, args.work_dir or settings.home / "replay-service", host=args.host,
                 port=args.port, parallelism=args.parallelism)


def _verify(args: argparse.Namespace) -> int:
    from memstack.jobs.verify import main

    return main(args.a, args.b, as_json=args.json, portable=args.portable, tenant=args.tenant,
                vectors=not args.no_vectors)


def _switch(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.pipelines.replay.switch import current_stores, switch_stores

    settings = Settings.from_env()
    previous = switch_stores(settings, args.dir)
    print(f"serving from {current_stores(settings)} (was {previous})")
    return 0


def _current(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.pipelines.replay.switch import current_stores

    print(current_stores(Settings.from_env()))
    return 0
