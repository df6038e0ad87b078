"""``memstack shards worker|router|status|verify``: live workers sharded by partition, and
the router that answers every query over all of them (docs/scaling.md)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from memstack.jobs.run import add_arguments

    p = sub.add_parser("shards", help="sharded live workers and the router over them")
    cmds = p.add_subparsers(dest="shards_command", required=True)
    w = cmds.add_parser("worker", help="one live worker of the sharded group: it owns the "
                                       "shards of the partitions Kafka assigns it")
    add_arguments(w)
    w.add_argument("--worker", help="this worker's name (default: host-pid)")
    w.add_argument("--shard-host", default="127.0.0.1",
                   help="interface of the shard API the router calls (default loopback)")
    w.add_argument("--shard-port", type=int, default=0, help="its port (default: any free)")
    w.add_argument("--group", help="consumer group (default <prefix>-sharded); every worker "
                                   "of one deployment uses the same")
    w.set_defaults(func=_worker)
    r = cmds.add_parser("router", help="the read API over every shard (facts, history, "
                                       "search, records, context)")
    r.add_argument("--stores", type=Path, default=None,
                   help="the sharded root whose workers/ cards name the workers "
                        "(default: $MEMSTACK_HOME/stores/sharded)")
    r.add_argument("--peer", action="append", default=[],
                   help="a worker's shard API URL (repeat; instead of the cards)")
    r.add_argument("--host", default="127.0.0.1")
    r.add_argument("--port", type=int, default=8766)
    r.add_argument("--after-timeout", type=float, default=30.0,
                   help="seconds a read with after= waits before 504 (default 30)")
    r.set_defaults(func=_router)
    s = cmds.add_parser("status", help="which worker owns which partition, applied offsets")
    s.add_argument("--stores", type=Path, default=None)
    s.add_argument("--peer", action="append", default=[])
    s.set_defaults(func=_status)
    v = cmds.add_parser("verify", help="content hashes of all shards (stopped) vs one store")
    v.add_argument("sharded", type=Path, help="the sharded root (its shards/ directory)")
    v.add_argument("single", type=Path, help="one stores directory over the same log")
    v.set_defaults(func=_verify)


def _worker(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.jobs.run import options_from, quiet_libraries
    from memstack.jobs.shards import WorkerOptions, run_shard_worker

    quiet_libraries(logging.getLogger().isEnabledFor(logging.DEBUG))
    options = WorkerOptions(options_from(args), worker=args.worker, shard_host=args.shard_host,
                            shard_port=args.shard_port, group=args.group)
    return run_shard_worker(Settings.from_env(), options)


def _router(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.jobs.shards import run_router

    return run_router(Settings.from_env(), args.stores, args.peer, args.host, args.port,
                      args.after_timeout)


def _status(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.jobs.shards import discover_workers, sharded_root
    from memstack.pipelines.log_reader import end_offsets
    from memstack.server.router.fanout import Fanout

    settings = Settings.from_env()
    ends = end_offsets(settings.bootstrap, settings.events_topic)
    fanout = Fanout(discover_workers(sharded_root(settings, args.stores), args.peer),
                    sorted(ends))
    try:
        found = fanout.coverage()
    finally:
        fanout.close()
    print(json.dumps({"owners": {str(p): u for p, u in sorted(found.owners.items())},
                      "applied": {str(p): o for p, o in sorted(found.applied.items())},
                      "end_offsets": {str(p): o for p, o in sorted(ends.items())},
                      "missing_partitions": sorted(found.missing),
                      "catching_up": sorted(found.catching_up)}))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from memstack.pipelines.shards.verify import sharded_hashes, single_hashes

    sharded, single = sharded_hashes(args.sharded), single_hashes(args.single)
    print(json.dumps({"equal": sharded == single, "sharded": sharded, "single": single}))
    return 0 if sharded == single else 1
