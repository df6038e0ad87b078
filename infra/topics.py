"""memstack's topics, created idempotently with explicit configs (see docs/kafka.md).

``ensure_topics`` creates what is missing and checks what exists: a topic whose partition count
or configs differ from its spec raises :class:`TopicConfigMismatchError`; nothing is altered.

Replication: a spec that leaves ``replication_factor`` / ``min_insync_replicas`` as None takes
them from the cluster when its topic is created (:func:`replication_for`: 3 and 2 on a cluster of
3 brokers or more, else the broker count and 1), so producers' ``acks=all`` means "on two
replicas" wherever there are three. Both apply to new topics only; an existing topic's are its
own (they are not checked).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from memstack.foundation.errors import KafkaAuthorizationError
from memstack.foundation.kafka_security import KafkaSecurity
from memstack.infra.errors import TopicConfigMismatchError, TopicError
from memstack.infra.net import admin_client

log = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = 36
_TOPIC_AUTHORIZATION_FAILED = 29

# The log keeps everything forever; time comes from the broker (transaction time).
_FOREVER: Mapping[str, str] = {
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "cleanup.policy": "delete",
    "message.timestamp.type": "LogAppendTime",
}


@dataclass(frozen=True)
class TopicSpec:
    """A topic memstack owns: its name, partition count and the configs it must have."""

    name: str
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict, hash=False)
    purpose: str = ""
    replication_factor: int | None = None
    """Replicas of the topic when created; None: from the cluster (:func:`replication_for`)."""
    min_insync_replicas: int | None = None
    """``min.insync.replicas`` set on the topic when created; None: :func:`replication_for`."""


@dataclass(frozen=True)
class Replication:
    """How a new topic is replicated: its replica count and ``min.insync.replicas``."""

    factor: int
    min_insync: int


def replication_for(brokers: int, factor: int | None = None,
                    min_insync: int | None = None) -> Replication:
    """The replication of a new topic on a cluster of ``brokers`` brokers.

    Not given: 3 replicas and ``min.insync.replicas`` 2 on 3 brokers or more (an ``acks=all``
    write survives one broker down and is on two before it counts), else one replica per
    broker and 1. ``min_insync`` not given with ``factor`` given: 2 when ``factor`` >= 3,
    else 1. A factor above the broker count or a ``min_insync`` above the factor (``acks=all``
    writes could never succeed) is a :class:`TopicError`.
    """
    if brokers < 1:
        raise TopicError(f"the cluster reports {brokers} brokers: cannot place a topic")
    if factor is None:
        factor = 3 if brokers >= 3 else brokers
    if factor < 1 or factor > brokers:
        raise TopicError(f"replication factor {factor} needs 1 to {brokers} brokers "
                         f"(the cluster has {brokers}; --replication-factor)")
    if min_insync is None:
        min_insync = 2 if factor >= 3 else 1
    if min_insync < 1 or min_insync > factor:
        raise TopicError(f"min.insync.replicas {min_insync} must be 1 to the replication "
                         f"factor {factor}: acks=all writes would always fail "
                         "(--min-insync-replicas)")
    return Replication(factor, min_insync)


def cluster_brokers(client: KafkaAdminClient) -> int:
    """How many brokers the cluster reports (its metadata)."""
    return len(client.describe_cluster().get("brokers") or [])


@dataclass(frozen=True)
class TopicsResult:
    created: tuple[str, ...]
    existing: tuple[str, ...]


@dataclass(frozen=True)
class TopicInfo:
    """A topic as the broker describes it; ``partitions`` is 0 when it does not exist."""

    name: str
    exists: bool
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict, hash=False)


def topic_specs(prefix: str, partitions: int = 3) -> list[TopicSpec]:
    """The four topics of one memstack deployment, in a fixed order."""
    if partitions < 1:
        raise TopicError(f"partitions={partitions} must be >= 1 (MEMSTACK_PARTITIONS)")
    return [
        TopicSpec(f"{prefix}.events", partitions, MappingProxyType(dict(_FOREVER)),
                  "the immutable event log: the source of truth"),
        TopicSpec(f"{prefix}.forget", partitions, MappingProxyType(dict(_FOREVER)),
                  "forget requests: a ledger that is never deleted"),
        TopicSpec(f"{prefix}.dlq", partitions,
                  MappingProxyType({"retention.ms": "-1", "retention.bytes": "-1",
                                    "cleanup.policy": "delete"}),
                  "dead letters with their reasons: bad input is kept"),
        TopicSpec(f"{prefix}.keys", 1,
                  MappingProxyType({"cleanup.policy": "compact",
                                    "min.cleanable.dirty.ratio": "0.01",
                                    "segment.ms": "60000",
                                    "delete.retention.ms": "1000"}),
                  "per-subject keys for crypto-shredding: compacted, tombstones go fast"),
    ]


def ensure_topics(bootstrap: str, prefix: str, partitions: int = 3,
                  *, timeout_s: float = 30.0, security: KafkaSecurity | None = None) -> list[str]:
    """Create memstack's topics under ``prefix`` unless they exist; return all their names."""
    specs = topic_specs(prefix, partitions)
    apply_topic_specs(bootstrap, specs, timeout_s=timeout_s, security=security)
    return [s.name for s in specs]


def apply_topic_specs(bootstrap: str, specs: Sequence[TopicSpec],
                      *, timeout_s: float = 30.0,
                      security: KafkaSecurity | None = None) -> TopicsResult:
    """Create the missing topics of ``specs`` and verify the existing ones against their spec.
    ``security``: how to authenticate (default: the process's ``MEMSTACK_KAFKA_*``)."""
    with admin_client(bootstrap, timeout_s, security) as client:
        brokers = cluster_brokers(client)
        new = [_new_topic(s, brokers) for s in specs]
        response = client.create_topics(new, timeout_ms=int(timeout_s * 1000),
                                         raise_errors=False, wait_for_metadata=False)
        created, existing = _sort_outcomes(response)
        if created:  # waited for here: kafka-python would also wait for refused topics
            client.wait_for_topics(created, timeout_ms=int(timeout_s * 1000))
        if existing:
            _verify(client, [s for s in specs if s.name in existing])
    if created:
        log.info("created topics %s at %s", ", ".join(created), bootstrap)
    return TopicsResult(tuple(created), tuple(existing))


def _new_topic(spec: TopicSpec, brokers: int) -> NewTopic:
    replication = replication_for(brokers, spec.replication_factor, spec.min_insync_replicas)
    configs = {**spec.configs, "min.insync.replicas": str(replication.min_insync)}
    return NewTopic(spec.name, spec.partitions, replication.factor, topic_configs=configs)


def _sort_outcomes(response: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    created: list[str] = []
    existing: list[str] = []
    failures: list[str] = []
    denied: list[str] = []
    for topic in response.get("topics", []):
        code = topic.get("error_code", 0)
        if code == 0:
            created.append(topic["name"])
        elif code == _TOPIC_ALREADY_EXISTS:
            existing.append(topic["name"])
        elif code == _TOPIC_AUTHORIZATION_FAILED:
            denied.append(topic["name"])
        else:
            failures.append(f"{topic['name']}: error {code} {topic.get('error_message') or ''}")
    if denied:
        raise KafkaAuthorizationError(
            f"the broker denied creating {', '.join(denied)} (TopicAuthorizationFailed): this "
            "principal lacks CREATE on them; run `memstack topics create` as the admin role "
            "(`memstack topics acls` prints its ACLs)")
    if failures:
        raise TopicError("the broker refused to create topics: " + "; ".join(failures))
    return created, existing


def _verify(client: KafkaAdminClient, specs: Sequence[TopicSpec]) -> None:
    problems = _problems(client, specs)
    if problems:
        raise TopicConfigMismatchError(
            "existing topics differ from memstack's topic specs (memstack does not alter them):\n"
            + "\n".join(f"  - {p}" for p in problems)
            + "\nUse another MEMSTACK_TOPIC_PREFIX, set MEMSTACK_PARTITIONS to match, or fix "
            "the topic yourself (kafka-configs --alter, or delete and recreate it)."
        )


def _problems(client: KafkaAdminClient, specs: Sequence[TopicSpec]) -> list[str]:
    """How the existing topics of ``specs`` differ from them (partitions, configs)."""
    counts = _partition_counts(client, [s.name for s in specs])
    problems: list[str] = []
    for spec in specs:
        actual = _read_configs(client, spec.name, list(spec.configs))
        if counts.get(spec.name) != spec.partitions:
            problems.append(f"{spec.name}: partitions is {counts.get(spec.name)}, "
                            f"memstack expects {spec.partitions}")
        for key, want in spec.configs.items():
            if actual.get(key) != want:
                problems.append(f"{spec.name}: {key} is {actual.get(key)!r}, "
                                f"memstack expects {want!r}")
    return problems


def check_topics(bootstrap: str, specs: Sequence[TopicSpec], *, timeout_s: float = 10.0,
                 security: KafkaSecurity | None = None) -> list[str]:
    """What is wrong with the topics of ``specs`` on the cluster: missing ones and those whose
    partitions or configs differ; empty when all are as memstack needs them."""
    with admin_client(bootstrap, timeout_s, security) as client:
        present = set(client.list_topics())
        missing = [f"{s.name}: missing (`memstack topics create` makes it)"
                   for s in specs if s.name not in present]
        return missing + _problems(client, [s for s in specs if s.name in present])


def _partition_counts(client: KafkaAdminClient, names: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for topic in client.describe_topics(list(names)):
        if topic.get("error_code", 0) == 0:
            counts[topic["name"]] = len(topic.get("partitions") or [])
    return counts


def _read_configs(client: KafkaAdminClient, name: str, keys: Sequence[str] | None = None,
                  config_filter: str = "all") -> dict[str, str]:
    """Values of ``keys`` (all keys when None) of topic ``name``, as the broker applies them."""
    wanted = None if keys is None else dict.fromkeys(keys)
    resource = ConfigResource(ConfigResourceType.TOPIC, name, configs=wanted)
    response = client.describe_configs([resource], config_filter=config_filter)
    entries = response.get("topic", {}).get(name, {})
    return {key: str(entry.get("value")) for key, entry in entries.items()}


def describe_topics(bootstrap: str, names: Sequence[str], *, timeout_s: float = 10.0,
                    all_configs: bool = False,
                    security: KafkaSecurity | None = None) -> list[TopicInfo]:
    """Describe ``names``: existence, partition count and configs (those set on the topic,
    or every effective config with ``all_configs``)."""
    with admin_client(bootstrap, timeout_s, security) as client:
        config_filter = "all" if all_configs else "modified"
        present = set(client.list_topics())
        counts = _partition_counts(client, [n for n in names if n in present])
        infos = []
        for name in names:
            if name not in present:
                infos.append(TopicInfo(name, False, 0))
                continue
            configs = _read_configs(client, name, None, config_filter)
            infos.append(TopicInfo(name, True, counts.get(name, 0), MappingProxyType(configs)))
    return infos
