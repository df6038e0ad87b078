"""``memstack infra ray up | down | status | kill-node``: a multi-node Ray cluster on loopback.

The cluster's files live in ``$MEMSTACK_HOME/ray-cluster`` (see
:mod:`memstack.infra.ray.cluster`); ``memstack consolidate --ray ADDRESS`` runs the
consolidation actors on it.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from memstack.foundation.settings import Settings
from memstack.infra.ray.cluster import DEFAULT_GCS_PORT, HEAD, NodeShape, RayCluster


def register(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ray = actions.add_parser("ray", help="a Ray cluster of a head and worker nodes on 127.0.0.1 "
                                         "for `memstack consolidate --ray`")
    sub = ray.add_subparsers(dest="ray_command", metavar="ACTION")
    sub.required = True
    up = sub.add_parser("up", help="start the head and worker nodes w1..wN that are not running")
    up.add_argument("--workers", type=int, default=1, help="worker nodes (default 1)")
    up.add_argument("--cpus", type=int, default=NodeShape.num_cpus, help="CPUs per node")
    up.add_argument("--object-store-mb", type=int, default=150, help="object store per node")
    up.add_argument("--port", type=int,
                    default=int(os.environ.get("MEMSTACK_RAY_PORT") or DEFAULT_GCS_PORT),
                    help="the head's GCS port (MEMSTACK_RAY_PORT; default %(default)s)")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait per node")
    up.set_defaults(func=_up)
    down = sub.add_parser("down", help="stop every node of the cluster")
    down.set_defaults(func=_down)
    status = sub.add_parser("status", help="the nodes, their processes and Ray node ids")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(func=_status)
    kill = sub.add_parser("kill-node", help="SIGKILL one node's processes (a crash; `up` "
                                            "starts it again)")
    kill.add_argument("name", help="w1, w2, ... (or head)")
    kill.set_defaults(func=_kill)


def _cluster() -> RayCluster:
    return RayCluster(Settings.from_env().home / "ray-cluster")


def _up(args: argparse.Namespace) -> int:
    if args.workers < 0 or args.cpus < 1:
        raise SystemExit("--workers must be >= 0 and --cpus >= 1")
    cluster = _cluster()
    started = time.monotonic()
    shape = NodeShape(num_cpus=args.cpus, object_store_bytes=args.object_store_mb * 1024 * 1024)
    state = cluster.up(args.workers, shape, gcs_port=args.port, timeout_s=args.timeout)
    nodes = cluster.alive_nodes()
    print(f"ray cluster at {state.address} ({time.monotonic() - started:.1f} s): "
          + ", ".join(f"{n} (process group {state.nodes[n]}, node {nodes.get(n, '?')[:12]})"
                      for n in state.nodes))
    print(f"consolidate on it: memstack consolidate --ray {state.address} --actors "
          f"{len(state.nodes)}")
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster = _cluster()
    stopped = cluster.down()
    print(f"stopped ray nodes {stopped}" if stopped
          else f"no ray cluster running for {cluster.home}")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = _cluster()
    state = cluster.state()
    nodes = cluster.node_report()
    up = {n for n, info in nodes.items() if info["running"] and info["node_id"]}
    if args.json:
        print(json.dumps({"running": HEAD in up, "home": str(cluster.home), "nodes": nodes,
                          "address": state.address if state else None}, sort_keys=True))
        return 0
    if state is None:
        print(f"ray cluster: not running ({cluster.home}; `memstack infra ray up`)")
        return 0
    print(f"ray cluster at {state.address}: " + ", ".join(
        f"{n} {'alive' if n in up else 'DOWN'}" for n in nodes))
    return 0


def _kill(args: argparse.Namespace) -> int:
    cluster = _cluster()
    if cluster.stop_node(args.name, kill=True):
        print(f"killed ray node {args.name} (SIGKILL to its process group); "
              "`memstack infra ray up` starts it again")
        return 0
    print(f"no running ray node {args.name!r} in {cluster.home}")
    return 1
