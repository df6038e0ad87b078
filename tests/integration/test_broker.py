"""The real Apache Kafka broker: reachable, topics configured, log time, interop, lifecycle."""

from __future__ import annotations

import argparse
import json
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from memstack.foundation.errors import BrokerUnavailableError
from memstack.foundation.settings import Settings
from memstack.infra import jars
from memstack.infra.broker import FAST_START_JVM_OPTIONS, KafkaBroker
from memstack.infra.console import console_consume, console_produce
from memstack.infra.errors import (
    BrokerStartError,
    JavaNotFoundError,
    PortInUseError,
    TopicConfigMismatchError,
    TopicError,
)
from memstack.infra.net import admin_client, free_port_pair
from memstack.infra.topics import (
    apply_topic_specs,
    cluster_brokers,
    describe_topics,
    ensure_topics,
    replication_for,
    topic_specs,
)
from memstack.jobs.commands import infra as infra_command

LOG_APPEND_TIME = 1  # kafka-python's ConsumerRecord.timestamp_type for LogAppendTime


def _produce(settings: Settings, topic: str, key: bytes, value: bytes, **kw: Any) -> None:
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks="all",
                             enable_idempotence=True)
    try:
        producer.send(topic, key=key, value=value, **kw).get(timeout=30)
    finally:
        producer.close()


def _consume_all(settings: Settings, topic: str, expected: int) -> list[Any]:
    consumer = KafkaConsumer(topic, bootstrap_servers=settings.bootstrap,
                             group_id=f"g-{uuid.uuid4().hex[:8]}", auto_offset_reset="earliest",
                             session_timeout_ms=6000, consumer_timeout_ms=20000)
    records: list[Any] = []
    try:
        for record in consumer:
            records.append(record)
            if len(records) >= expected:
                break
    finally:
        consumer.close()
    return records


def test_broker_answers_metadata(kafka: Any) -> None:
    with admin_client(kafka.bootstrap) as client:
        cluster = client.describe_cluster()
    assert [b["port"] for b in cluster["brokers"]] == [kafka.port]
    assert cluster["brokers"][0]["host"] == "127.0.0.1" or kafka.broker is None
    if kafka.broker is not None:
        assert kafka.broker.is_ready()
        assert kafka.broker.status().running


def test_topics_have_their_configs(topics: Settings) -> None:
    specs = topic_specs(topics.topic_prefix, topics.partitions)
    infos = {i.name: i for i in describe_topics(topics.bootstrap, [s.name for s in specs],
                                                all_configs=True)}
    for spec in specs:
        info = infos[spec.name]
        assert info.exists
        assert info.partitions == spec.partitions
        for key, value in spec.configs.items():
            assert info.configs[key] == value, (spec.name, key)
    assert infos[topics.events_topic].configs["message.timestamp.type"] == "LogAppendTime"
    assert infos[f"{topics.topic_prefix}.keys"].configs["cleanup.policy"] == "compact"
    assert infos[f"{topics.topic_prefix}.keys"].partitions == 1
    assert infos[topics.dlq_topic].configs["retention.ms"] == "-1"
    # replication from the cluster: min.insync.replicas 1 on one broker, 2 on three or more
    with admin_client(topics.bootstrap) as client:
        want = str(replication_for(cluster_brokers(client)).min_insync)
    assert all(info.configs["min.insync.replicas"] == want for info in infos.values())


def test_a_replication_factor_above_the_broker_count_is_refused_before_creating(
        kafka: Any) -> None:
    import dataclasses

    if kafka.broker is None:
        pytest.skip("an external cluster may have 3 brokers")
    prefix = f"t-rf-{uuid.uuid4().hex[:8]}"
    specs = [dataclasses.replace(s, replication_factor=3) for s in topic_specs(prefix, 3)]
    with pytest.raises(TopicError, match="replication factor 3 needs 1 to 1 brokers"):
        apply_topic_specs(kafka.bootstrap, specs)
    with admin_client(kafka.bootstrap) as client:
        assert not [t for t in client.list_topics() if t.startswith(prefix)]


def test_ensure_topics_is_idempotent(topics: Settings) -> None:
    again = ensure_topics(topics.bootstrap, topics.topic_prefix, topics.partitions)
    assert again == [topics.events_topic, topics.forget_topic, topics.dlq_topic,
                     f"{topics.topic_prefix}.keys"]


def test_existing_topic_with_other_config_is_reported(kafka: Any) -> None:
    prefix = f"t-mismatch-{uuid.uuid4().hex[:8]}"
    with admin_client(kafka.bootstrap) as client:
        client.create_topics([NewTopic(f"{prefix}.events", 3, 1,
                                       topic_configs={"message.timestamp.type": "CreateTime"})])
    with pytest.raises(TopicConfigMismatchError) as err:
        ensure_topics(kafka.bootstrap, prefix, 3)
    assert f"{prefix}.events: message.timestamp.type is 'CreateTime'" in str(err.value)
    infos = describe_topics(kafka.bootstrap, [f"{prefix}.events"], all_configs=True)
    assert infos[0].configs["message.timestamp.type"] == "CreateTime"  # not altered


def test_record_gets_log_append_time(topics: Settings) -> None:
    sent_ts = 978_307_200_000  # 2001-01-01: the broker must replace it with its append time
    before = int(time.time() * 1000)
    _produce(topics, topics.events_topic, b"k", b"v", timestamp_ms=sent_ts)
    after = int(time.time() * 1000)
    [record] = _consume_all(topics, topics.events_topic, 1)
    assert record.timestamp_type == LOG_APPEND_TIME
    assert record.timestamp != sent_ts
    assert before - 5_000 <= record.timestamp <= after + 5_000


def test_console_consumer_reads_python_record(topics: Settings) -> None:
    value = f"from python {uuid.uuid4()}"
    _produce(topics, topics.events_topic, b"session-1", value.encode())
    records = console_consume(topics.bootstrap, topics.events_topic, 1)
    assert [(r.key, r.value) for r in records] == [("session-1", value)]
    assert records[0].timestamp_type == "LogAppendTime"


def test_python_reads_console_producer_records(topics: Settings) -> None:
    values = [f"from console {i} {uuid.uuid4()}" for i in range(3)]
    console_produce(topics.bootstrap, topics.events_topic, values, keys=["a", "b", "c"])
    records = _consume_all(topics, topics.events_topic, 3)
    got = sorted((r.key.decode(), r.value.decode()) for r in records)
    assert got == sorted(zip(["a", "b", "c"], values, strict=True))
    assert all(r.timestamp_type == LOG_APPEND_TIME for r in records)


def test_unreachable_bootstrap_says_how_to_start(tmp_path: Path) -> None:
    port, _ = free_port_pair()
    with pytest.raises(BrokerUnavailableError, match="memstack infra up"):
        ensure_topics(f"127.0.0.1:{port}", "nowhere", timeout_s=1)


def test_port_in_use_names_the_variable(tmp_path: Path) -> None:
    port, controller_port = free_port_pair()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(PortInUseError, match=f"{port}.*MEMSTACK_KAFKA_PORT"):
            KafkaBroker(tmp_path, port, controller_port).start()


def test_missing_java_says_how_to_install(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="apt-get install"):
        jars.java_executable()


def test_failed_start_shows_the_log_tail(tmp_path: Path) -> None:
    port, controller_port = free_port_pair()
    broker = KafkaBroker(tmp_path / "k", port, controller_port, heap="256m",
                         jvm_options=FAST_START_JVM_OPTIONS)
    broker.format()
    meta = broker.data_dir / "log" / "meta.properties"
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=7"))
    with pytest.raises(BrokerStartError, match="exited during start-up") as err:
        broker.start(timeout_s=60)
    assert "broker.log" in str(err.value)
    assert "Stored node id 7 doesn't match" in str(err.value)
    assert not broker.status().running


def test_jar_resolution_is_stamped() -> None:
    lib = jars.resolve_jars()
    assert jars.is_resolved()
    assert (lib / jars.STAMP_NAME).read_text().strip() == jars.pom_hash()
    assert list(lib.glob("kafka_2.13-4.*.jar")) and list(lib.glob("kafka-tools-4.*.jar"))


def cli_main(argv: list[str]) -> int:
    """``memstack ARGV`` with only the infra command registered (as memstack.cli dispatches it),
    so that this test does not depend on the other commands importing cleanly."""
    parser = argparse.ArgumentParser(prog="memstack")
    sub = parser.add_subparsers(dest="command", required=True)
    infra_command.register(sub)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def test_cli_up_status_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    port, controller_port = free_port_pair()
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path))
    monkeypatch.setenv("MEMSTACK_KAFKA_PORT", str(port))
    monkeypatch.setenv("MEMSTACK_KAFKA_CONTROLLER_PORT", str(controller_port))
    monkeypatch.setenv("MEMSTACK_TOPIC_PREFIX", "cli")
    monkeypatch.delenv("MEMSTACK_BOOTSTRAP", raising=False)
    try:
        assert cli_main(["infra", "up", "--fast-start"]) == 0
        assert "created topic cli.events" in capsys.readouterr().out
        assert cli_main(["infra", "up"]) == 0  # idempotent
        assert "already running" in capsys.readouterr().out
        assert cli_main(["infra", "status", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["broker"]["running"] and report["broker"]["ready"]
        assert report["broker"]["bootstrap"] == f"127.0.0.1:{port}"
        assert {t["name"] for t in report["topics"] if t["exists"]} == {
            "cli.events", "cli.forget", "cli.dlq", "cli.keys"}
    finally:
        assert cli_main(["infra", "down"]) == 0
    assert "stopped broker" in capsys.readouterr().out
    assert cli_main(["infra", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["broker"]["running"] is False
