"""``memstack infra flink up | down | status``: a standalone Flink cluster on loopback.

The cluster's files live in ``$MEMSTACK_HOME/flink`` (see :mod:`memstack.infra.flink.cluster`);
``memstack replay --flink HOST:PORT`` submits the replay to it.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from memstack.foundation.settings import Settings
from memstack.infra.flink.cluster import DEFAULT_REST_PORT, ClusterShape, FlinkCluster


def register(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    flink = actions.add_parser("flink", help="a standalone Flink cluster (JobManager and "
                                             "TaskManagers) for `memstack replay --flink`")
    sub = flink.add_subparsers(dest="flink_command", metavar="ACTION")
    sub.required = True
    up = sub.add_parser("up", help="start a JobManager and N TaskManagers on 127.0.0.1")
    up.add_argument("--taskmanagers", type=int, default=2, help="TaskManager processes")
    up.add_argument("--slots", type=int, default=1, help="task slots per TaskManager")
    up.add_argument("--port", type=int,
                    default=int(os.environ.get("MEMSTACK_FLINK_PORT") or DEFAULT_REST_PORT),
                    help="REST port (MEMSTACK_FLINK_PORT; default %(default)s); RPC is port+1")
    up.add_argument("--taskmanager-memory", default=ClusterShape.taskmanager_memory,
                    help="process size of each TaskManager JVM (default %(default)s)")
    up.add_argument("--timeout", type=float, default=180.0,
                    help="seconds to wait for every TaskManager to register")
    up.set_defaults(func=_up)
    down = sub.add_parser("down", help="stop every process of the cluster")
    down.set_defaults(func=_down)
    status = sub.add_parser("status", help="the cluster's processes and its REST address")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(func=_status)


def _cluster() -> FlinkCluster:
    return FlinkCluster(Settings.from_env().home / "flink")


def _up(args: argparse.Namespace) -> int:
    if args.taskmanagers < 1 or args.slots < 1:
        raise SystemExit("--taskmanagers and --slots must be at least 1")
    cluster = _cluster()
    before = cluster.status()
    shape = ClusterShape(rest_port=args.port, rpc_port=args.port + 1,
                         taskmanagers=args.taskmanagers, slots=args.slots,
                         taskmanager_memory=args.taskmanager_memory)
    started = time.monotonic()
    status = cluster.start(shape, timeout_s=args.timeout)
    if before.running:
        print(f"flink cluster already running at {status.rest}: {len(status.taskmanagers)} "
              f"TaskManager(s), {status.slots_total} slot(s) (`memstack infra flink down` "
              "first to change its shape)")
    else:
        print(f"started flink cluster at {status.rest} in {time.monotonic() - started:.1f} s: "
              f"JobManager pid {status.jobmanager}, TaskManager pids {status.taskmanagers}, "
              f"{status.slots_total} slot(s); logs in {cluster.log_dir}")
    print(f"replay on it: memstack replay --flink {status.rest} --parallelism "
          f"{status.slots_total} --into DIR")
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster = _cluster()
    stopped = cluster.stop()
    if stopped:
        print(f"stopped flink process groups {stopped} (files kept in {cluster.home})")
    else:
        print(f"no flink cluster running for {cluster.home}")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = _cluster().status()
    if args.json:
        print(json.dumps(status.as_dict(), sort_keys=True))
        return 0
    if not status.running:
        print(f"flink cluster: not running ({status.home}; `memstack infra flink up`)")
        return 0
    answering = "answering" if status.registered >= 0 else "NOT answering"
    print(f"flink cluster: running at {status.rest} ({answering}); JobManager pid "
          f"{status.jobmanager}; TaskManager pids {status.taskmanagers}, "
          f"{max(status.registered, 0)} registered, {status.slots_total} slot(s); "
          f"files in {status.home}")
    return 0
