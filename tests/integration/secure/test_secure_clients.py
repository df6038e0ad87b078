"""memstack's Kafka clients on a broker with SASL_SSL (SCRAM-SHA-512) and ACLs.

Behaviour, not broker log text: an authenticated write is acknowledged and reads back, an ACL
denial is reported as one, and each misconfiguration fails within 10 s naming its cause. No
password appears in any captured log line, error, or the broker's own logs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourceType,
)

from memstack.aio import AsyncMemoryClient
from memstack.client import MemoryClient
from memstack.foundation.errors import KafkaAuthorizationError, KafkaSecurityError
from memstack.foundation.kafka_security import KafkaSecurity, Secret
from memstack.infra.acls import wait_visible
from memstack.infra.errors import TopicError
from memstack.infra.net import admin_client
from memstack.infra.preflight import require_topics
from memstack.infra.tls import ensure_certificates
from memstack.pipelines.log_reader import read_bounded
from tests.integration.secure.conftest import SecureKafka, SecureTopics

FAIL_FAST_S = 10.0


@pytest.fixture(autouse=True)
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every logger at DEBUG (kafka-python's protocol traces included) for the leak checks."""
    caplog.set_level(logging.DEBUG)
    yield caplog


def passwords(kafka: SecureKafka) -> list[str]:
    return [kafka.security.password_file(u).read_text().strip() for u in kafka.security.users()]


def assert_no_password(kafka: SecureKafka, *texts: str) -> None:
    for secret in passwords(kafka):
        for text in texts:
            assert secret not in text


def test_sdk_writes_and_the_log_reads_back_over_sasl_ssl_scram_512(
        secure_topics: SecureTopics, monkeypatch: pytest.MonkeyPatch,
        debug_logs: pytest.LogCaptureFixture) -> None:
    settings = secure_topics.use(monkeypatch, "service")
    assert settings.kafka_security.protocol == "SASL_SSL"
    assert settings.kafka_security.mechanism == "SCRAM-SHA-512"
    with MemoryClient("acme", "planner", settings=settings) as client:
        written = client.emit_confirmed([client.events.note("s1", f"note {i}")
                                         for i in range(3)])
    records = list(read_bounded(settings.bootstrap, settings.events_topic))
    assert sorted((r.position.partition, r.position.offset) for r in records) == sorted(
        (w.partition, w.offset) for w in written)
    assert_no_password(secure_topics.kafka, debug_logs.text)


def test_a_producer_only_principal_writes_events_but_cannot_read_them(
        secure_topics: SecureTopics, monkeypatch: pytest.MonkeyPatch,
        debug_logs: pytest.LogCaptureFixture) -> None:
    settings = secure_topics.use(monkeypatch, "agent")
    with MemoryClient("acme", "agent", settings=settings) as client:
        [written] = client.emit_confirmed([client.events.note("s1", "from the agent")])
    assert written.offset >= 0
    started = time.monotonic()
    with pytest.raises(KafkaAuthorizationError, match="memstack-agent") as denied:
        list(read_bounded(settings.bootstrap, settings.events_topic))
    assert time.monotonic() - started < FAIL_FAST_S
    assert "TopicAuthorizationFailed" in str(denied.value)
    assert settings.events_topic in str(denied.value)
    secure_topics.use(monkeypatch, "service")  # the service principal reads what it wrote
    assert len(list(read_bounded(settings.bootstrap, settings.events_topic))) == 1
    assert_no_password(secure_topics.kafka, debug_logs.text, str(denied.value))


def test_a_producer_only_principal_cannot_write_a_forget(
        secure_topics: SecureTopics, monkeypatch: pytest.MonkeyPatch,
        debug_logs: pytest.LogCaptureFixture) -> None:
    """A forget destroys data for good: the agent role (what a possibly prompt-injected agent
    holds) may add memory, not erase it."""
    settings = secure_topics.use(monkeypatch, "agent")
    started = time.monotonic()
    with MemoryClient("acme", "agent", settings=settings) as client, \
            pytest.raises(KafkaAuthorizationError, match="memstack-agent") as denied:
        client.emit_confirmed([client.events.forget({"type": "session", "session": "s1"})])
    assert time.monotonic() - started < FAIL_FAST_S
    assert settings.forget_topic in str(denied.value)
    secure_topics.use(monkeypatch, "service")
    assert list(read_bounded(settings.bootstrap, settings.forget_topic)) == []  # nothing logged
    assert_no_password(secure_topics.kafka, debug_logs.text, str(denied.value))


def test_a_wrong_password_fails_fast_naming_the_setting(
        secure_topics: SecureTopics, debug_logs: pytest.LogCaptureFixture) -> None:
    good = secure_topics.settings("agent")
    wrong = KafkaSecurity("SASL_SSL", "SCRAM-SHA-512", "memstack-agent",
                          Secret("not-the-password"), ca_file=good.kafka_security.ca_file)
    started = time.monotonic()
    with pytest.raises(KafkaSecurityError) as refused:
        MemoryClient("acme", "agent", settings=good.with_(kafka_security=wrong))
    assert time.monotonic() - started < FAIL_FAST_S
    message = str(refused.value)
    assert "MEMSTACK_KAFKA_SASL_PASSWORD" in message
    # what the broker said, or (kafka-python drops a response that comes with the close) that
    # it closed each login
    assert "invalid credentials" in message or "closed the connection" in message
    assert "not-the-password" not in message + debug_logs.text
    assert_no_password(secure_topics.kafka, debug_logs.text, message)


def test_an_untrusted_ca_fails_fast_naming_the_setting(
        secure_topics: SecureTopics, tmp_path_factory: pytest.TempPathFactory,
        debug_logs: pytest.LogCaptureFixture) -> None:
    good = secure_topics.settings("agent")
    other_ca = ensure_certificates(tmp_path_factory.mktemp("other-ca")).ca
    untrusted = KafkaSecurity("SASL_SSL", "SCRAM-SHA-512", "memstack-agent",
                              good.kafka_security.password, ca_file=other_ca)
    started = time.monotonic()
    with pytest.raises(KafkaSecurityError) as refused:
        MemoryClient("acme", "agent", settings=good.with_(kafka_security=untrusted))
    assert time.monotonic() - started < FAIL_FAST_S
    message = str(refused.value)
    assert f"MEMSTACK_KAFKA_SSL_CA_FILE={other_ca}" in message
    assert "not trusted" in message
    assert_no_password(secure_topics.kafka, debug_logs.text, message)


def test_a_missing_acl_fails_fast_naming_the_principal_and_topic(
        secure_topics: SecureTopics, debug_logs: pytest.LogCaptureFixture) -> None:
    agent = secure_topics.settings("agent")
    elsewhere = agent.with_(topic_prefix=secure_topics.prefix + "-no-acls")
    started = time.monotonic()
    with MemoryClient("acme", "agent", settings=elsewhere) as client, \
            pytest.raises(KafkaAuthorizationError) as denied:
        client.emit_confirmed([client.events.note("s1", "nowhere to go")])
    assert time.monotonic() - started < FAIL_FAST_S
    message = str(denied.value)
    assert "'memstack-agent'" in message and elsewhere.events_topic in message
    assert "memstack topics acls" in message
    assert_no_password(secure_topics.kafka, debug_logs.text, message)


def test_the_broker_logs_hold_no_password(secure_kafka: SecureKafka) -> None:
    logs = [p.read_text(errors="replace") for p in (secure_kafka.broker.data_dir / "broker.log",
                                                     secure_kafka.broker.data_dir / "broker.out")
            if p.is_file()]
    assert logs
    assert_no_password(secure_kafka, *logs)


def test_the_async_client_writes_and_reports_a_denied_write(
        secure_topics: SecureTopics, debug_logs: pytest.LogCaptureFixture) -> None:
    agent = secure_topics.settings("agent")
    elsewhere = agent.with_(topic_prefix=secure_topics.prefix + "-no-acls")

    async def scenario() -> tuple[int, str]:
        async with AsyncMemoryClient("acme", "agent", settings=agent) as client:
            written = await client.note("s1", "async over SASL_SSL")
        async with AsyncMemoryClient("acme", "agent", settings=elsewhere) as denied_client:
            with pytest.raises(KafkaAuthorizationError) as denied:
                await denied_client.note("s1", "nowhere")
        return written.offset, str(denied.value)

    started = time.monotonic()
    offset, message = asyncio.run(scenario())
    assert time.monotonic() - started < 2 * FAIL_FAST_S
    assert offset >= 0
    assert "'memstack-agent'" in message and elsewhere.events_topic in message
    assert_no_password(secure_topics.kafka, debug_logs.text, message)


def test_a_jobs_preflight_names_a_wrong_password(
        secure_topics: SecureTopics, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        debug_logs: pytest.LogCaptureFixture) -> None:
    """``memstack serve``, ``run`` and the other jobs check the connection before Faust's
    aiokafka would retry a refused login for ever."""
    settings = secure_topics.use(monkeypatch, "service")
    (tmp_path / "wrong").write_text("not-the-password\n")
    monkeypatch.setenv("MEMSTACK_KAFKA_SASL_PASSWORD_FILE", str(tmp_path / "wrong"))
    started = time.monotonic()
    with pytest.raises(KafkaSecurityError, match="MEMSTACK_KAFKA_SASL_PASSWORD"):
        require_topics(settings.bootstrap, [settings.events_topic])
    assert time.monotonic() - started < FAIL_FAST_S
    assert_no_password(secure_topics.kafka, debug_logs.text)


def test_rules_are_waited_for_until_the_broker_applies_them(secure_topics: SecureTopics) -> None:
    """``apply_acls`` returns once the authorizer lists its rules; a rule never created is
    reported after the wait, naming how many are missing."""
    kafka = secure_topics.kafka
    rule = ACL("User:nobody-at-all", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
               ResourcePattern(ResourceType.TOPIC, f"{secure_topics.prefix}.events",
                               ACLResourcePatternType.LITERAL))
    with admin_client(kafka.bootstrap, security=kafka.security.client("admin")) as client:
        wait_visible(client, [])  # nothing to wait for
        with pytest.raises(TopicError, match="1 of 1 ACLs created are still not applied"):
            wait_visible(client, [rule], timeout_s=1.0)
        client.create_acls([rule])
        wait_visible(client, [rule])
