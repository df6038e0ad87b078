"""The ACLs each memstack role needs on a cluster with an authorizer (docs/kafka.md).

Roles:

- ``service``: the live worker and ``memstack serve``: reads and writes every topic under the
  prefix (the log, the forget ledger, dead letters, keys, Faust's changelogs), deletes records
  (forgetting), and joins the consumer groups named ``<prefix>-...``;
- ``agent``: a producer-only agent (the SDK's ``MemoryClient``): writes events and nothing
  else; it cannot read memory back, and it cannot erase it either (a forget request destroys
  data for good: it goes through the service's forget route, whose API keys carry the
  ``forget`` role, or an operator's ``memstack forget`` as the service principal);
- ``admin``: ``memstack topics create|check|describe``: creates and inspects the topics.

``role_acls`` is the one definition: ``memstack topics acls`` prints it, and the local broker
started with ``memstack infra up --secure`` applies it (``apply_acls``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from memstack.infra.errors import TopicError

ROLES = ("service", "agent", "admin")
ACLS_VISIBLE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class AclRule:
    """Allow ``operations`` on one resource (a literal name or a name prefix)."""

    role: str
    resource: str  # TOPIC, GROUP or CLUSTER
    name: str
    pattern: str  # LITERAL or PREFIXED
    operations: tuple[str, ...]

    def line(self, principal: str) -> str:
        """As ``kafka-acls`` would be told it."""
        ops = " ".join(f"--operation {_pascal(op)}" for op in self.operations)
        if self.resource == "CLUSTER":
            target = "--cluster"
        else:
            target = f"--{self.resource.lower()} '{self.name}'"
            if self.pattern == "PREFIXED":
                target += " --resource-pattern-type prefixed"
        return f"kafka-acls --add --allow-principal {principal} {ops} {target}"


def _pascal(name: str) -> str:
    """``DESCRIBE_CONFIGS`` as kafka-acls spells it: ``DescribeConfigs``."""
    return "".join(part.capitalize() for part in name.split("_"))


def role_acls(prefix: str) -> dict[str, list[AclRule]]:
    """Every role's rules for the topics and groups of one ``MEMSTACK_TOPIC_PREFIX``."""
    agent_topics = [f"{prefix}.events", f"{prefix}.keys"]  # not .forget: see the agent role
    return {
        "service": [
            AclRule("service", "TOPIC", prefix, "PREFIXED",
                    ("READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS", "CREATE", "DELETE")),
            AclRule("service", "GROUP", prefix, "PREFIXED", ("READ", "DESCRIBE")),
            AclRule("service", "CLUSTER", "kafka-cluster", "LITERAL", ("DESCRIBE",)),
        ],
        "agent": [AclRule("agent", "TOPIC", name, "LITERAL", ("WRITE", "DESCRIBE"))
                  for name in agent_topics],
        "admin": [
            AclRule("admin", "TOPIC", prefix, "PREFIXED",
                    ("CREATE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS")),
            AclRule("admin", "CLUSTER", "kafka-cluster", "LITERAL",
                    ("DESCRIBE", "DESCRIBE_CONFIGS")),
        ],
    }


def acl_lines(prefix: str, principals: Mapping[str, str]) -> list[str]:
    """``kafka-acls`` commands granting each role's rules to its principal (``User:name``)."""
    lines: list[str] = []
    for role, rules in role_acls(prefix).items():
        lines.append(f"# {role}: {principals.get(role, f'User:<{role}>')}")
        lines.extend(rule.line(principals.get(role, f"User:<{role}>")) for rule in rules)
    return lines


def apply_acls(client: KafkaAdminClient, prefix: str, principals: Mapping[str, str],
               roles: Sequence[str] = ROLES) -> int:
    """Create the rules of ``roles`` for ``principals``; the number of ACLs created."""
    acls = [ACL(principals[role], "*", ACLOperation[op], ACLPermissionType.ALLOW,
                ResourcePattern(ResourceType[rule.resource], rule.name,
                                ACLResourcePatternType[rule.pattern]))
            for role in roles for rule in role_acls(prefix)[role] for op in rule.operations]
    result = client.create_acls(acls)
    failed = result.get("failed") or []
    if failed:
        raise TopicError(f"the broker refused {len(failed)} ACLs: {failed[:3]}")
    wait_visible(client, acls)
    return len(acls)


def wait_visible(client: KafkaAdminClient, acls: Sequence[ACL],
                 timeout_s: float = ACLS_VISIBLE_TIMEOUT_S) -> None:
    """Return once the broker's authorizer lists every one of ``acls``.

    ``create_acls`` answers when the controller has accepted the rules; the broker applies them
    when it has read them from the metadata log, a moment later. A client allowed only by a rule
    still on its way is refused (``TopicAuthorizationFailedError``), so whoever creates rules and
    then uses them waits here. On a cluster of several brokers each one catches up on its own;
    this asks the one the admin client talks to.
    """
    wanted = set(acls)
    everything = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                           ResourcePatternFilter(ResourceType.ANY, None,
                                                 ACLResourcePatternType.ANY))
    deadline = time.monotonic() + timeout_s
    missing = wanted
    while True:
        listed, _error = client.describe_acls(everything)
        missing = wanted - set(listed or [])
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TopicError(
                f"{len(missing)} of {len(wanted)} ACLs created are still not applied by the broker "
                f"after {timeout_s:.0f} s (for example {sorted(map(repr, missing))[:2]}); "
                "check the broker's log for the metadata log falling behind, "
                "then run the command again")
        time.sleep(0.1)
