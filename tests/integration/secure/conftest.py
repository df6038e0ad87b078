"""A secure local broker for the tests in this folder only (the plain tests never pay for it).

``secure_kafka`` (session): one broker as ``memstack infra up --secure`` starts it: SASL_SSL
with SCRAM-SHA-512, a CA and certificate made under its data dir, ACLs on. ``secure_topics``
(function): a new topic prefix with memstack's topics (created by the admin principal) and every
role's ACLs for it; returns a :class:`SecureTopics` that gives each role's settings.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memstack.foundation.settings import Settings
from memstack.infra.acls import apply_acls
from memstack.infra.broker import FAST_START_JVM_OPTIONS, KafkaBroker
from memstack.infra.local_security import LocalSecurity
from memstack.infra.net import admin_client, free_port_pair
from memstack.infra.topics import ensure_topics

TEST_PARTITIONS = 3


@dataclass(frozen=True)
class SecureKafka:
    broker: KafkaBroker
    security: LocalSecurity

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap


@dataclass(frozen=True)
class SecureTopics:
    kafka: SecureKafka
    prefix: str
    home: Path

    def settings(self, role: str) -> Settings:
        """Settings of one role (``service``, ``agent``, ``admin``) on this prefix."""
        return Settings(home=self.home, kafka_port=self.kafka.broker.port,
                        controller_port=self.kafka.broker.controller_port,
                        bootstrap=self.kafka.bootstrap, topic_prefix=self.prefix,
                        partitions=TEST_PARTITIONS,
                        kafka_security=self.kafka.security.client(role))

    def use(self, monkeypatch: pytest.MonkeyPatch, role: str) -> Settings:
        """Make ``role`` this process's security (``MEMSTACK_KAFKA_*``) and return its
        settings: the clients built from a bootstrap alone read the environment."""
        for key, value in self.kafka.security.client_env(role).items():
            monkeypatch.setenv(key, value)
        return self.settings(role)


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    port, controller_port = free_port_pair()
    data = tmp_path_factory.mktemp("kafka-secure")
    security = LocalSecurity(data / "secrets")
    broker = KafkaBroker(data, port, controller_port, jvm_options=FAST_START_JVM_OPTIONS,
                         security=security)
    broker.start(timeout_s=120)
    try:
        yield SecureKafka(broker, security)
    finally:
        broker.stop()


@pytest.fixture
def secure_topics(secure_kafka: SecureKafka, request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> SecureTopics:
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:30].strip("-")
    prefix = f"s-{name}-{uuid.uuid4().hex[:8]}"
    admin = secure_kafka.security.client("admin")
    ensure_topics(secure_kafka.bootstrap, prefix, TEST_PARTITIONS, security=admin)
    with admin_client(secure_kafka.bootstrap, security=admin) as client:
        apply_acls(client, prefix, secure_kafka.security.principals(), ("service", "agent"))
    return SecureTopics(secure_kafka, prefix, tmp_path_factory.mktemp("home"))
