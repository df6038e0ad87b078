"""``python -m memstack.jobs.bench.cluster_check replay|ray [options]``: the two cluster runs,
measured (a lab tool: it runs from a checkout, like the benchmarks).

- ``replay``: one log, replayed on the local mini-cluster and on a standalone Flink cluster of
  ``--taskmanagers`` TaskManagers (``--slots`` each) at the same ``--parallelism``; the two
  stores directories must verify equal. Figures: seconds of each whole job, start-up and
  processing events/s, the cluster's own start-up.
- ``ray``: a fact feed consolidated on a Ray cluster (a head and ``--workers`` worker nodes) by
  ``--actors`` actors, once uninterrupted and once with worker node ``w1`` killed (SIGKILL of its
  process group) after the first round and started again; the learners' digests must be equal.

Both print exactly one JSON line on stdout (logs on stderr). They start their own broker unless
one answers at ``MEMSTACK_BOOTSTRAP``
(:func:`memstack.jobs.bench.broker_env.scratch_deployment`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from memstack.foundation.settings import Settings

log = logging.getLogger("memstack.cluster_check")


def emit_conversations(settings: Settings, sessions: int) -> int:
    """``sessions`` conversations of ten events, every text distinct (the replay bench's log)."""
    from memstack.client import MemoryClient
    from memstack.foundation.builders import Defaults, EventBuilder
    from memstack.jobs.bench.workload import conversation

    builder = EventBuilder(Defaults("bench", "helper"))
    events = [e for i in range(sessions) for e in conversation(builder, i)]
    with MemoryClient("bench", "helper", settings=settings) as client:
        client.emit_confirmed(events)
    return len(events)


def _replay(settings: Settings, into: Path, parallelism: int,
            cluster: str | None) -> dict[str, float]:
    from memstack.pipelines.replay.bounds import Earliest
    from memstack.pipelines.replay.job import ReplaySpec, timed_replay

    timed = timed_replay(ReplaySpec(into=into, start=Earliest(), parallelism=parallelism,
                                    cluster=cluster, work_dir=into.parent / f".{into.name}.flink"),
                         settings)
    return {"seconds": timed.seconds, "startup_s": timed.startup_s, "finish_s": timed.finish_s,
            "processing_events_per_s": timed.processing_events_per_s}


def replay_check(settings: Settings, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from memstack.infra.flink.cluster import ClusterShape, FlinkCluster
    from memstack.infra.net import free_port_pair
    from memstack.pipelines.replay.verify import compare

    events = emit_conversations(settings, args.events // 10)
    log.info("emitted %d events to %s", events, settings.events_topic)
    mini = _replay(settings, work / "mini", args.parallelism, None)
    log.info("mini-cluster p=%d: %s", args.parallelism, mini)
    cluster = FlinkCluster(work / "flink")
    rest, rpc = free_port_pair()
    try:
        began = time.perf_counter()
        cluster.start(ClusterShape(rest, rpc, args.taskmanagers, args.slots,
                                   taskmanager_memory=args.taskmanager_memory))
        up_s = time.perf_counter() - began
        on_cluster = _replay(settings, work / "cluster", args.parallelism, f"127.0.0.1:{rest}")
        log.info("cluster %d TM x %d slots p=%d (up in %.1f s): %s", args.taskmanagers,
                 args.slots, args.parallelism, up_s, on_cluster)
    finally:
        cluster.stop()
    equal = compare(work / "mini", work / "cluster").equal
    return {"check": "replay", "events": events, "cores": os.cpu_count(),
            "parallelism": args.parallelism, "taskmanagers": args.taskmanagers,
            "slots": args.slots, "cluster_up_s": round(up_s, 2),
            **{f"mini_{k}": round(v, 2) for k, v in mini.items()},
            **{f"cluster_{k}": round(v, 2) for k, v in on_cluster.items()},
            "cluster_vs_mini_whole": round(mini["seconds"] / on_cluster["seconds"], 3),
            "cluster_vs_mini_processing": round(on_cluster["processing_events_per_s"]
                                                / max(mini["processing_events_per_s"], 1e-9), 3),
            "verify_equal": 1 if equal else 0}


def produce_fact_feed(settings: Settings, encoder: Any, teacher: Path, users: int) -> int:
    """Facts of two tenants (``acme`` in 2 shards), then a wave of supersessions, through the
    live pipeline's memory operator and the real feed producer; returns the feed's records."""
    from datetime import UTC, datetime, timedelta

    from memstack.foundation.builders import Defaults, EventBuilder
    from memstack.operators.log import LoggedEvent, LogPosition
    from memstack.operators.memory import MemoryOperator
    from memstack.pipelines.consolidation.distill import Distiller, StoreTeacher
    from memstack.pipelines.consolidation.feed import Sharding
    from memstack.pipelines.consolidation.producer import (
        FeedProducer,
        ensure_feed_topic,
        publish_committed,
    )
    from memstack.pipelines.log_reader import end_offsets
    from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex

    t0 = datetime(2026, 3, 2, tzinfo=UTC)
    acme, globex = (EventBuilder(Defaults(t, "helper", source="cluster-check"))
                    for t in ("acme", "globex"))
    cities = ["Lisbon", "Porto", "Faro", "Braga", "Evora", "Coimbra"]
    facts = [(b, i, k, rel) for b in (acme, globex) for i in range(users)
             for k, rel in enumerate(("lives_in", "works_in"))]
    first = [LoggedEvent(b.fact("s1", f"user:{i}", rel, cities[(i + k) % 6]),
                         LogPosition(t0 + timedelta(seconds=t), 0, t))
             for t, (b, i, k, rel) in enumerate(facts)]
    later = [LoggedEvent(acme.fact("s2", f"user:{i}", "lives_in", cities[(i + 3) % 6]),
                         LogPosition(t0 + timedelta(days=1, seconds=i), 0, len(first) + i))
             for i in range(0, users, 2)]
    topic = ensure_feed_topic(settings)
    events = DuckDBEventIndex(teacher)
    producer = FeedProducer(settings.bootstrap, topic, Distiller(StoreTeacher(events, encoder)),
                            Sharding.parse("acme=2"))
    try:
        publish_committed((first[:len(first) // 2], first[len(first) // 2:], later),
                          MemoryOperator(), events, producer)
    finally:
        producer.close()
        events.close()
    return sum(end_offsets(settings.bootstrap, topic).values())


def ray_check(settings: Settings, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from memstack.infra.ray import RayConfig
    from memstack.infra.ray.cluster import NodeShape, RayCluster, free_port
    from memstack.operators.consolidation import FeatureConfig, LearnerConfig
    from memstack.pipelines.consolidation.distill import reference_centre
    from memstack.pipelines.consolidation.job import JobConfig, run_job
    from memstack.pipelines.embedding import shared_encoder

    encoder = shared_encoder().load()
    records = produce_fact_feed(settings, encoder, work / "teacher.duckdb", args.users)
    centre = reference_centre(encoder)
    cluster = RayCluster(work / "ray-cluster")
    config = JobConfig(actors=args.actors, until_caught_up=True, window=args.window,
                       checkpoint_every=10**9, progress_every_s=args.round_s,
                       learner=LearnerConfig(features=FeatureConfig(dim=args.dim)))
    try:
        began = time.perf_counter()
        cluster.up(args.workers, NodeShape(num_cpus=args.cpus), gcs_port=free_port())
        up_s = time.perf_counter() - began
        ray = RayConfig(address=cluster.address(), token_path=cluster.token_path)
        runs: dict[str, Any] = {}
        for name, crash in (("whole", False), ("resumed", True)):
            lines: list[str] = []
            began = time.perf_counter()
            statuses = run_job(settings.with_(home=work / name), config, centre=centre,
                               ray_config=ray, progress=_crasher(cluster, lines, crash))
            runs[name] = {"seconds": time.perf_counter() - began, "statuses": statuses,
                          "lost": sum("lost" in line for line in lines)}
            log.info("%s: %.1f s, %d actor(s) lost", name, runs[name]["seconds"],
                     runs[name]["lost"])
    finally:
        cluster.down()
    digests = {n: {k: d for s in r["statuses"] for k, d in s.digests.items()}
               for n, r in runs.items()}
    return {"check": "ray", "feed_records": records, "cores": os.cpu_count(),
            "nodes": args.workers + 1, "actors": args.actors, "cluster_up_s": round(up_s, 2),
            "whole_seconds": round(runs["whole"]["seconds"], 2),
            "resumed_seconds": round(runs["resumed"]["seconds"], 2),
            "whole_records_per_s": round(records / runs["whole"]["seconds"], 1),
            "nodes_used_whole": len({s.node for s in runs["whole"]["statuses"]}),
            "nodes_used_resumed": len({s.node for s in runs["resumed"]["statuses"]}),
            "actors_lost": runs["resumed"]["lost"],
            "digests_equal": 1 if digests["whole"] == digests["resumed"] else 0}


def _offsets(text: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in (pair.split(":") for pair in text.split(",") if pair)}


def moved_everywhere(line: str) -> bool:
    """Whether a job progress line (``offsets {0: 32, 1: 16} of {...}; ...``) shows every
    partition past offset 0 (every actor has a checkpoint to resume from) and some partition
    short of its target (the job goes on for another round, so a crash now loses an actor: on
    the line that ends the job, nothing would notice a node's death)."""
    if not line.startswith("offsets {"):
        return False
    done = _offsets(line.removeprefix("offsets {").split("}", 1)[0])
    target = _offsets(line.split(" of {", 1)[1].split("}", 1)[0]) if " of {" in line else {}
    return all(o > 0 for o in done.values()) and any(
        done.get(p, 0) < o for p, o in target.items())


def _crasher(cluster: Any, lines: list[str], crash: bool) -> Any:
    """A progress callback that, with ``crash``, kills node w1 once every actor has a
    checkpoint (the first round that moved every partition) and starts it again."""
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        first = moved_everywhere(line) and not any(moved_everywhere(x) for x in lines)
        lines.append(line)
        if crash and first:
            cluster.stop_node("w1", kill=True)
            cluster.up(len(cluster.state().nodes) - 1)
    return say


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memstack.jobs.bench.cluster_check",
                                     description=__doc__)
    sub = parser.add_subparsers(dest="check", required=True)
    r = sub.add_parser("replay")
    r.add_argument("--events", type=int, default=2000)
    r.add_argument("--taskmanagers", type=int, default=2)
    r.add_argument("--slots", type=int, default=1)
    r.add_argument("--parallelism", type=int, default=2)
    r.add_argument("--taskmanager-memory", default="1280m")
    y = sub.add_parser("ray")
    y.add_argument("--users", type=int, default=120)
    y.add_argument("--workers", type=int, default=1)
    y.add_argument("--cpus", type=int, default=2, help="CPUs per node")
    y.add_argument("--actors", type=int, default=2)
    y.add_argument("--window", type=int, default=16)
    y.add_argument("--dim", type=int, default=256)
    y.add_argument("--round-s", type=float, default=0.05)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from tempfile import TemporaryDirectory

    from memstack.jobs.bench.broker_env import scratch_deployment

    base = Settings.from_env()
    with scratch_deployment(base) as settings, TemporaryDirectory(prefix="memstack-cc-") as tmp:
        check = replay_check if args.check == "replay" else ray_check
        result = check(settings, Path(tmp), args)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
