"""``memstack topics create|check|describe|acls``: memstack's topics on any cluster.

All four read the usual settings: ``MEMSTACK_BOOTSTRAP``, ``MEMSTACK_TOPIC_PREFIX``,
``MEMSTACK_PARTITIONS`` and the client security (``MEMSTACK_KAFKA_*``, docs/kafka.md). Nothing
here starts a broker, and nothing alters an existing topic.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging

from memstack.foundation.kafka_connect import check_connection
from memstack.foundation.settings import Settings
from memstack.infra.acls import ROLES, acl_lines
from memstack.infra.net import admin_client
from memstack.infra.topics import (
    Replication,
    TopicSpec,
    apply_topic_specs,
    check_topics,
    cluster_brokers,
    describe_topics,
    replication_for,
    topic_specs,
)

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("topics", help="create, check or describe memstack's topics on a "
                                           "cluster; print the ACLs each role needs")
    actions = parser.add_subparsers(dest="topics_command", metavar="ACTION")
    actions.required = True
    create = actions.add_parser("create", help="create the missing topics, check the others")
    create.add_argument("--dry-run", action="store_true",
                        help="print what would be created; change nothing")
    create.add_argument("--replication-factor", type=int, default=None, metavar="N",
                        help="replicas of each new topic (default: 3 on a cluster of 3 brokers "
                             "or more, else the broker count)")
    create.add_argument("--min-insync-replicas", type=int, default=None, metavar="N",
                        help="min.insync.replicas of each new topic (default: 2 with 3 "
                             "replicas or more, else 1)")
    create.set_defaults(func=_create)
    check = actions.add_parser("check", help="exit 1 unless every topic exists as memstack "
                                             "needs it")
    check.set_defaults(func=_check)
    describe = actions.add_parser("describe", help="each topic's partitions and configs")
    describe.add_argument("--json", action="store_true", help="print one JSON object")
    describe.set_defaults(func=_describe)
    acls = actions.add_parser("acls", help="print the ACLs of each memstack role "
                                           "(kafka-acls commands)")
    for role in ROLES:
        acls.add_argument(f"--{role}", metavar="PRINCIPAL", default=f"User:<{role}>",
                          help=f"the {role} principal (default User:<{role}>)")
    acls.set_defaults(func=_acls)


def _specs(settings: Settings, replication_factor: int | None = None,
           min_insync_replicas: int | None = None) -> list[TopicSpec]:
    return [dataclasses.replace(s, replication_factor=replication_factor,
                                min_insync_replicas=min_insync_replicas)
            for s in topic_specs(settings.topic_prefix, settings.partitions)]


def _dry_run_replication(settings: Settings, factor: int | None,
                         min_insync: int | None) -> tuple[Replication, str]:
    """What new topics would get; the cluster is asked only when ``factor`` is not given."""
    if factor is not None:  # no broker needed: what was given, min.insync.replicas by the rule
        return replication_for(factor, factor, min_insync), "as given"
    check_connection(settings.bootstrap, settings.kafka_security)
    with admin_client(settings.bootstrap, security=settings.kafka_security) as client:
        brokers = cluster_brokers(client)
    return replication_for(brokers, None, min_insync), f"from the cluster's {brokers} broker(s)"


def _create(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    specs = _specs(settings, args.replication_factor, args.min_insync_replicas)
    if args.dry_run:
        replication, why = _dry_run_replication(settings, args.replication_factor,
                                                 args.min_insync_replicas)
        print(f"would create at {settings.bootstrap} "
              f"({settings.kafka_security.describe()}), unless they exist (replication "
              f"{why}; acks=all):")
        for spec in specs:
            configs = ", ".join(f"{k}={v}" for k, v in spec.configs.items())
            print(f"  {spec.name}: {spec.partitions} partitions, replication factor "
                  f"{replication.factor}, min.insync.replicas {replication.min_insync}; "
                  f"{configs}")
        return 0
    check_connection(settings.bootstrap, settings.kafka_security)
    result = apply_topic_specs(settings.bootstrap, specs, security=settings.kafka_security)
    for name in result.created:
        print(f"created topic {name}")
    for name in result.existing:
        print(f"topic {name} exists with memstack's configs")
    return 0


def _check(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    return report_check(settings)


def report_check(settings: Settings) -> int:
    """Print what is wrong with memstack's topics on the cluster; 0 when nothing is."""
    check_connection(settings.bootstrap, settings.kafka_security)
    problems = check_topics(settings.bootstrap, _specs(settings),
                            security=settings.kafka_security)
    where = f"{settings.bootstrap} ({settings.kafka_security.describe()})"
    if not problems:
        print(f"topics of prefix {settings.topic_prefix!r} at {where}: all as memstack needs")
        return 0
    print(f"topics of prefix {settings.topic_prefix!r} at {where}:")
    for problem in problems:
        print(f"  - {problem}")
    return 1


def _describe(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    check_connection(settings.bootstrap, settings.kafka_security)
    names = [s.name for s in _specs(settings)]
    infos = describe_topics(settings.bootstrap, names, security=settings.kafka_security)
    if args.json:
        print(json.dumps([{"name": i.name, "exists": i.exists, "partitions": i.partitions,
                           "configs": dict(i.configs)} for i in infos], sort_keys=True))
        return 0
    for info in infos:
        if not info.exists:
            print(f"{info.name}: missing")
            continue
        configs = ", ".join(f"{k}={v}" for k, v in sorted(info.configs.items()))
        print(f"{info.name}: {info.partitions} partitions; {configs}")
    return 0


def _acls(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    principals = {role: getattr(args, role) for role in ROLES}
    print(f"# ACLs of memstack's roles for topic prefix {settings.topic_prefix!r}")
    for line in acl_lines(settings.topic_prefix, principals):
        print(line)
    return 0
