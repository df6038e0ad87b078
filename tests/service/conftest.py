"""The live service under test: ``memstack serve`` as a child process on a real broker.

One service for the package's tests (starting it loads the model and joins the consumer group,
~10-20 s; tests use their own sessions and subjects): its own topics, stores and home, a free
port, keys for two tenants with every role, one read-only key and one write-only key; payloads
sealed (the default) so a forget shreds the log too. Stopped with SIGTERM at the end;
the fixture then checks it drained (exit 0) and removed ``service.json``.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from memstack.foundation.settings import Settings
from memstack.jobs.service import spawn_service
from tests.conftest import KafkaUnderTest, settings_on_fresh_topics

KEYS = {"acme": "acme-key-all-0001", "other": "other-key-all-001",
        "acme-read": "acme-key-read-001", "acme-write": "acme-key-write-01"}


@dataclass
class Service:
    url: str
    settings: Settings
    process: subprocess.Popen[bytes]
    log: Path

    def client(self, who: str = "acme") -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60.0,
                            headers={"Authorization": f"Bearer {KEYS[who]}"})

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def start_service(settings: Settings, log: Path, *extra: str,
                  env: dict[str, str] | None = None) -> Service:
    env = {"MEMSTACK_API_KEYS_FILE": "", "MEMSTACK_API_KEYS": ",".join([
        f"{KEYS['acme']}:acme", f"{KEYS['other']}:other",
        f"{KEYS['acme-read']}:acme:read", f"{KEYS['acme-write']}:acme:write"]), **(env or {})}
    process, url = spawn_service(settings, log, "--within", "0.05", "--after-timeout", "60",
                                 *extra, env=env)
    return Service(url, settings, process, log)


def stop_service(service: Service, timeout_s: float = 60.0) -> int:
    service.process.send_signal(signal.SIGTERM)
    try:
        return service.process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        service.process.kill()
        raise


@contextmanager
def running_service(settings: Settings, log: Path, *extra: str) -> Iterator[Service]:
    """A started service; on leaving, stopped with SIGTERM, and it must have drained (exit 0)."""
    running = start_service(settings, log, *extra)
    try:
        yield running
    finally:
        code = stop_service(running)
        assert code == 0, running.log_tail()


def fresh_settings(kafka: KafkaUnderTest, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """A new topic prefix with memstack's topics, and a new home."""
    return settings_on_fresh_topics(kafka, tmp_path_factory.mktemp("svc-home"), "t-svc")


@pytest.fixture(scope="package")
def service_settings(kafka: KafkaUnderTest,
                     tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return fresh_settings(kafka, tmp_path_factory)


@pytest.fixture(scope="package")
def service(service_settings: Settings,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    log = tmp_path_factory.mktemp("svc-log") / "serve.log"
    with running_service(service_settings, log) as running:
        yield running
    assert not (service_settings.home / "service.json").exists()


def event(tenant: str, session: str, text: str, **extra: Any) -> dict[str, Any]:
    """One message event as the documented JSON."""
    from memstack.schemas.ids import uuid7

    return {"event_id": str(uuid7()), "tenant": tenant, "agent": "tester", "session": session,
            "kind": "message", "occurred_at": "2026-11-30T12:00:00Z",
            "provenance": {"source": "test", "authority": "agent"},
            "payload": {"role": "user", "text": text}, **extra}


def fact(tenant: str, subject: str, relation: str, obj: str) -> dict[str, Any]:
    from memstack.schemas.ids import uuid7

    return {"event_id": str(uuid7()), "tenant": tenant, "agent": "tester", "session": "facts",
            "kind": "fact_asserted", "occurred_at": "2026-11-30T12:00:00Z",
            "subject": subject, "provenance": {"source": "test", "authority": "agent"},
            "payload": {"relation": relation, "object": obj}}


