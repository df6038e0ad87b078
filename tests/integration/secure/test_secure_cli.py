"""``memstack infra up --secure`` and ``memstack topics ...`` against running brokers."""

from __future__ import annotations

import argparse
import shlex
import time
import uuid
from pathlib import Path

import pytest

from memstack.client import MemoryClient
from memstack.foundation.errors import KafkaAuthorizationError
from memstack.foundation.settings import Settings
from memstack.infra.acls import acl_lines
from memstack.infra.console import run_tool
from memstack.infra.errors import PortInUseError
from memstack.infra.net import free_port_pair
from memstack.infra.topics import ensure_topics
from memstack.jobs.commands import infra as infra_command
from memstack.jobs.commands import topics as topics_command
from tests.integration.secure.conftest import SecureKafka


def cli_main(argv: list[str]) -> int:
    """``memstack ARGV`` with only the infra and topics commands registered."""
    parser = argparse.ArgumentParser(prog="memstack")
    sub = parser.add_subparsers(dest="command", required=True)
    infra_command.register(sub)
    topics_command.register(sub)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def use_role(kafka: SecureKafka, monkeypatch: pytest.MonkeyPatch, role: str,
             prefix: str, home: Path) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(home))
    monkeypatch.setenv("MEMSTACK_BOOTSTRAP", kafka.bootstrap)
    monkeypatch.setenv("MEMSTACK_TOPIC_PREFIX", prefix)
    for key, value in kafka.security.client_env(role).items():
        monkeypatch.setenv(key, value)


def test_topics_create_check_describe_with_a_new_prefix(
        secure_kafka: SecureKafka, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"cli-{uuid.uuid4().hex[:8]}"
    use_role(secure_kafka, monkeypatch, "admin", prefix, tmp_path)
    assert cli_main(["topics", "check"]) == 1
    assert f"{prefix}.events: missing" in capsys.readouterr().out
    assert cli_main(["topics", "create", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{prefix}.events: 3 partitions, replication factor 1, min.insync.replicas 1" in out
    assert "replication from the cluster's 1 broker(s); acks=all" in out
    assert cli_main(["topics", "check"]) == 1  # the dry run created nothing
    capsys.readouterr()
    assert cli_main(["topics", "create"]) == 0
    assert f"created topic {prefix}.events" in capsys.readouterr().out
    assert cli_main(["topics", "create"]) == 0  # idempotent: checks what exists
    assert f"topic {prefix}.keys exists with memstack's configs" in capsys.readouterr().out
    assert cli_main(["topics", "check"]) == 0
    assert "all as memstack needs" in capsys.readouterr().out
    assert cli_main(["topics", "describe"]) == 0
    assert "message.timestamp.type=LogAppendTime" in capsys.readouterr().out


def test_a_producer_only_principal_cannot_create_topics(
        secure_kafka: SecureKafka, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_role(secure_kafka, monkeypatch, "agent", f"cli-{uuid.uuid4().hex[:8]}", tmp_path)
    started = time.monotonic()
    with pytest.raises(KafkaAuthorizationError, match="TopicAuthorizationFailed") as denied:
        cli_main(["topics", "create"])
    assert time.monotonic() - started < 10.0
    assert "admin role" in str(denied.value)


def test_infra_up_against_another_cluster_starts_nothing(
        secure_kafka: SecureKafka, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"cli-{uuid.uuid4().hex[:8]}"
    use_role(secure_kafka, monkeypatch, "admin", prefix, tmp_path)
    assert cli_main(["infra", "up"]) == 1  # the cluster answers; the topics are missing
    out = capsys.readouterr().out
    assert "no local broker is formatted or started" in out
    assert f"{prefix}.events: missing" in out
    assert not (tmp_path / "kafka").exists()
    assert cli_main(["topics", "create"]) == 0
    capsys.readouterr()
    assert cli_main(["infra", "up"]) == 0
    assert "all as memstack needs" in capsys.readouterr().out


def test_infra_up_secure_starts_a_broker_with_roles(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    monkeypatch.setenv("MEMSTACK_TOPIC_PREFIX", "sec")
    monkeypatch.delenv("MEMSTACK_BOOTSTRAP", raising=False)
    try:
        # Free ports are picked seconds before the broker binds them (storage, certificates):
        # another process of the machine (the other test lane) took one in CI once, and the
        # broker refused to start with PortInUseError. Fresh ports, then, a few times.
        for attempt in range(3):
            port, controller_port = free_port_pair()
            monkeypatch.setenv("MEMSTACK_KAFKA_PORT", str(port))
            monkeypatch.setenv("MEMSTACK_KAFKA_CONTROLLER_PORT", str(controller_port))
            try:
                assert cli_main(["infra", "up", "--secure", "--fast-start"]) == 0
                break
            except PortInUseError:
                if attempt == 2:
                    raise
                capsys.readouterr()
        out = capsys.readouterr().out
        assert "created topic sec.events" in out
        assert "ACLs for prefix 'sec'" in out
        service_env = tmp_path / "kafka" / "secrets" / "service.env"
        assert "MEMSTACK_KAFKA_SASL_PASSWORD_FILE=" in service_env.read_text()
        assert "SASL_PASSWORD=" not in service_env.read_text().replace("PASSWORD_FILE=", "")
        for line in service_env.read_text().splitlines():
            key, value = line.removeprefix("export ").split("=", 1)
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("MEMSTACK_BOOTSTRAP", f"127.0.0.1:{port}")
        assert cli_main(["topics", "check"]) == 0
        monkeypatch.delenv("MEMSTACK_BOOTSTRAP")
        assert cli_main(["infra", "status", "--json"]) == 0
        assert '"ready": true' in capsys.readouterr().out
    finally:
        assert cli_main(["infra", "down"]) == 0


def test_the_printed_acls_applied_with_kafka_acls_let_the_agent_write(
        secure_kafka: SecureKafka, tmp_path: Path) -> None:
    """``memstack topics acls`` prints commands Kafka's own AclCommand accepts; its client
    properties are the Flink connector's (``flink_properties``), so those are proven too."""
    prefix = f"acl-{uuid.uuid4().hex[:8]}"
    admin = secure_kafka.security.client("admin")
    ensure_topics(secure_kafka.bootstrap, prefix, 3, security=admin)
    config = tmp_path / "admin.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in admin.flink_properties().items()))
    lines = [line for line in acl_lines(prefix, secure_kafka.security.principals())
             if line.startswith("kafka-acls") and "memstack-agent" in line]
    assert len(lines) == 2  # the events and keys topics (no forgets: docs/kafka.md)
    for line in lines:
        run_tool("org.apache.kafka.tools.AclCommand",
                 [*shlex.split(line)[1:], "--bootstrap-server", secure_kafka.bootstrap,
                  "--command-config", str(config)])
    agent = Settings(home=tmp_path, bootstrap=secure_kafka.bootstrap, topic_prefix=prefix,
                     kafka_security=secure_kafka.security.client("agent"))
    with MemoryClient("acme", "agent", settings=agent) as client:
        [written] = client.emit_confirmed([client.events.note("s1", "allowed now")])
    assert written.topic == f"{prefix}.events"
