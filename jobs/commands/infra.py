"""``memstack infra up | down | status``: the local Kafka broker and memstack's topics."""

from __future__ import annotations

import argparse
import json
import logging
import time
from typing import Any

from memstack.foundation.errors import ConfigError
from memstack.foundation.settings import Settings
from memstack.infra.acls import apply_acls
from memstack.infra.broker import FAST_START_JVM_OPTIONS, KafkaBroker
from memstack.infra.jars import is_resolved
from memstack.infra.local_security import LocalSecurity
from memstack.infra.net import admin_client
from memstack.infra.topics import apply_topic_specs, describe_topics, topic_specs
from memstack.jobs.commands import _infra_flink, _infra_ray
from memstack.jobs.commands.topics import report_check

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("infra", help="run the local Kafka broker and create the topics")
    actions = parser.add_subparsers(dest="infra_command", metavar="ACTION")
    actions.required = True
    up = actions.add_parser("up", help="resolve jars, format, start the broker, create topics")
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the broker")
    up.add_argument("--fast-start", action="store_true",
                    help="C1-only JIT: starts ~2x faster on a busy machine, lower peak throughput")
    up.add_argument("--secure", action="store_true",
                    help="SASL_SSL (SCRAM-SHA-512) with ACLs; certificates and passwords are "
                         "made once under $MEMSTACK_HOME/kafka/secrets")
    up.set_defaults(func=_up)
    down = actions.add_parser("down", help="stop the broker (its data stays)")
    down.set_defaults(func=_down)
    status = actions.add_parser("status", help="show the broker and the topics")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(func=_status)
    _infra_flink.register(actions)  # memstack infra flink up|down|status
    _infra_ray.register(actions)  # memstack infra ray up|down|status|kill-node


def _broker(settings: Settings, *, fast_start: bool = False,
            secure: bool = False) -> KafkaBroker:
    """The local broker; secure when asked or when its storage was made secure."""
    options = FAST_START_JVM_OPTIONS if fast_start else ()
    secrets = LocalSecurity(settings.kafka_dir / "secrets")
    is_secure = secure or secrets.folder.is_dir()
    if secure and not secrets.folder.is_dir() and (settings.kafka_dir / "log").is_dir():
        raise ConfigError(
            f"the local broker in {settings.kafka_dir} was formatted without security; "
            "`memstack infra down` and remove that folder, or use another MEMSTACK_HOME, "
            "to start a secure one")
    return KafkaBroker(settings.kafka_dir, settings.kafka_port, settings.controller_port,
                       jvm_options=options, security=secrets if is_secure else None)


def _points_elsewhere(settings: Settings) -> bool:
    """True when MEMSTACK_BOOTSTRAP names a cluster other than the local broker's address."""
    return settings.bootstrap != f"127.0.0.1:{settings.kafka_port}"


def _quiet_kafka_client() -> None:
    # kafka-python logs every connection at INFO; the command reports what matters itself.
    logging.getLogger("kafka").setLevel(logging.WARNING)


def _up(args: argparse.Namespace) -> int:
    _quiet_kafka_client()
    settings = Settings.from_env()
    if _points_elsewhere(settings):
        if args.secure:
            raise ConfigError(f"--secure starts a local broker, but MEMSTACK_BOOTSTRAP="
                              f"{settings.bootstrap} points at another cluster")
        print(f"MEMSTACK_BOOTSTRAP={settings.bootstrap} points at an existing cluster: no "
              "local broker is formatted or started; checking the cluster and the topics")
        return report_check(settings)
    broker = _broker(settings, fast_start=args.fast_start, secure=args.secure)
    was_running = broker.status().running
    if not is_resolved():
        started = time.monotonic()
        lib = broker.resolve_jars()
        print(f"resolved Kafka jars into {lib} in {time.monotonic() - started:.1f} s")
    if not was_running and broker.format():
        print(f"formatted KRaft storage in {broker.data_dir}")
    started = time.monotonic()
    status = broker.start(timeout_s=args.timeout)
    if was_running:
        print(f"broker already running: pid {status.pid} at {status.bootstrap}")
    else:
        print(f"started broker: pid {status.pid} at {status.bootstrap} "
              f"in {time.monotonic() - started:.1f} s (log: {broker.data_dir / 'broker.log'})")
    result = apply_topic_specs(broker.bootstrap,
                               topic_specs(settings.topic_prefix, settings.partitions),
                               security=broker.client_security("admin"))
    for name in result.created:
        print(f"created topic {name}")
    for name in result.existing:
        print(f"topic {name} exists with memstack's configs")
    if broker.security is not None:
        _secure_roles(broker, broker.security, settings.topic_prefix)
    print(f"bootstrap: {broker.bootstrap}")
    return 0


def _secure_roles(broker: KafkaBroker, security: LocalSecurity, prefix: str) -> None:
    """Grant the roles' ACLs for ``prefix`` and write each role's client settings."""
    with admin_client(broker.bootstrap, security=security.client("admin")) as client:
        count = apply_acls(client, prefix, security.principals(), ("service", "agent"))
    print(f"ACLs for prefix {prefix!r}: {count} granted to "
          + ", ".join(f"{r} ({p})" for r, p in security.principals().items()))
    for role in security.principals():
        path = security.folder / f"{role}.env"
        path.write_text("".join(f"export {k}={v}\n" for k, v in
                                security.client_env(role).items()))
        print(f"client settings of {role}: source {path}")


def _down(args: argparse.Namespace) -> int:
    broker = _broker(Settings.from_env())
    pid = broker.status().pid
    if broker.stop():
        print(f"stopped broker pid {pid} (data kept in {broker.data_dir})")
    else:
        print(f"no broker running for {broker.data_dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    _quiet_kafka_client()
    report = status_report(Settings.from_env())
    if args.json:
        print(json.dumps(report, sort_keys=True))
        return 0
    b = report["broker"]
    state = f"running, pid {b['pid']}" if b["running"] else "not running"
    ready = "ready" if b["ready"] else "not answering"
    print(f"broker: {state}, {ready} at {b['bootstrap']} (data: {b['data_dir']})")
    for topic in report["topics"]:
        if not topic["exists"]:
            print(f"  {topic['name']}: missing (run `memstack infra up`)")
            continue
        configs = ", ".join(f"{k}={v}" for k, v in sorted(topic["configs"].items()))
        n = topic["partitions"]
        print(f"  {topic['name']}: {n} partition{'' if n == 1 else 's'}; {configs}")
    return 0


def status_report(settings: Settings) -> dict[str, Any]:
    """The broker's status and, when it answers, each memstack topic's partitions and configs."""
    broker = _broker(settings)
    status = broker.status()
    ready = status.running and broker.is_ready()
    topics: list[dict[str, Any]] = []
    if ready:
        names = [s.name for s in topic_specs(settings.topic_prefix, settings.partitions)]
        for info in describe_topics(broker.bootstrap, names,
                                    security=broker.client_security("admin")):
            topics.append({"name": info.name, "exists": info.exists,
                           "partitions": info.partitions, "configs": dict(info.configs)})
    return {
        "broker": {"running": status.running, "ready": ready, "pid": status.pid,
                   "bootstrap": status.bootstrap, "data_dir": str(status.data_dir),
                   "port": status.port},
        "topics": topics,
    }
