"""The live service (``memstack serve``: Faust worker on aiokafka + HTTP) over SASL_SSL with
SCRAM-SHA-512 as the service principal: a write is acknowledged, a read ``after=`` it sees it, a
forget ``after=`` hides it; the service's log holds no password. And on a cluster memstack did not
start: ``memstack topics create`` with a new prefix, then ``memstack serve`` on it, and no Java
process is started by either (no local broker)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from memstack import MemoryService
from memstack.infra.acls import apply_acls
from memstack.infra.net import admin_client
from tests.integration.secure.conftest import SecureKafka, SecureTopics
from tests.service.conftest import KEYS, running_service


def test_the_service_writes_reads_and_forgets_over_sasl_ssl(secure_topics: SecureTopics,
                                                            tmp_path: Path) -> None:
    settings = secure_topics.settings("service")
    log = tmp_path / "serve.log"
    with running_service(settings, log) as service, \
            MemoryService(service.url, api_key=KEYS["acme"], tenant="acme") as memory:
        receipt = memory.fact("s1", "user:ana", "lives_in", "Porto")
        answer = memory.facts(subject="user:ana", after=receipt)
        assert [f.object for f in answer.facts] == ["Porto"]
        forgot = memory.forget({"type": "session", "session": "s1"}, reason="asked")
        assert forgot.warnings == []  # sealed by default: nothing the forget cannot erase
        assert memory.facts(subject="user:ana", after=forgot).facts == []
    text = log.read_text(errors="replace")
    for user in secure_topics.kafka.security.users():
        assert secure_topics.kafka.security.password_file(user).read_text().strip() not in text


def _java_processes() -> dict[int, str]:
    """pid -> command line of every running Java process on this machine."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # exited meanwhile
        if argv and argv[0].endswith(b"java"):
            found[int(entry.name)] = b" ".join(argv).decode(errors="replace")
    return found


def test_topics_create_then_serve_on_a_new_prefix_starts_no_broker(
        secure_kafka: SecureKafka, tmp_path: Path) -> None:
    prefix, home = f"own-{uuid.uuid4().hex[:8]}", tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTACK_")}
    env |= {"MEMSTACK_HOME": str(home), "MEMSTACK_BOOTSTRAP": secure_kafka.bootstrap,
            "MEMSTACK_TOPIC_PREFIX": prefix, **secure_kafka.security.client_env("admin")}
    before = _java_processes()
    created = subprocess.run([sys.executable, "-m", "memstack.cli", "topics", "create"], env=env,
                             capture_output=True, text=True, timeout=120, check=False)
    assert created.returncode == 0, created.stderr
    assert f"created topic {prefix}.events" in created.stdout
    with admin_client(secure_kafka.bootstrap, security=secure_kafka.security.client("admin")) \
            as client:  # what a cluster admin applies from `memstack topics acls`
        apply_acls(client, prefix, secure_kafka.security.principals(), ("service", "agent"))
    topics = SecureTopics(secure_kafka, prefix, home)
    with running_service(topics.settings("service"), tmp_path / "serve.log") as service, \
            MemoryService(service.url, api_key=KEYS["acme"], tenant="acme") as memory:
        receipt = memory.note("s1", "the cluster was here before memstack")
        assert [r.text for r in memory.records(session="s1", after=receipt).records] == [
            "the cluster was here before memstack"]
        started = {pid: cmd for pid, cmd in _java_processes().items() if pid not in before}
        # Other tests may start brokers meanwhile (the side lane); none of ours may be new.
        assert not [cmd for cmd in started.values() if str(home) in cmd or prefix in cmd]
        assert not _descendants_were_java(service.process.pid, started), started
    assert not (home / "kafka").exists()  # no local broker's data dir was formatted


def _descendants_were_java(root: int, java: dict[int, str]) -> bool:
    """Whether any of the new Java processes is a child (or further) of ``root``."""
    for pid in java:
        try:
            stat = (Path("/proc") / str(pid) / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        while parent > 1:
            if parent == root:
                return True
            try:
                stat = (Path("/proc") / str(parent) / "stat").read_text()
            except OSError:
                break
            parent = int(stat.rsplit(")", 1)[1].split()[1])
    return False
