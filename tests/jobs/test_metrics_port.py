"""``memstack run --metrics-port``: the worker without an API serves its metrics on a port."""

from __future__ import annotations

import signal
import socket
import time
import uuid
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memstack.client import MemoryClient
from memstack.foundation.settings import Settings
from memstack.infra.topics import ensure_topics
from memstack.jobs.run import spawn_worker
from tests.conftest import TEST_PARTITIONS, KafkaUnderTest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def figures(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    try:
        text = httpx.get(url, timeout=10.0).text
    except httpx.HTTPError:
        return {}
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_run_serves_metrics_on_its_port(kafka: KafkaUnderTest, tmp_path: Path) -> None:
    prefix = f"t-mport-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka.bootstrap, prefix, TEST_PARTITIONS)
    settings = Settings(home=tmp_path, kafka_port=kafka.port,
                        controller_port=kafka.controller_port, bootstrap=kafka.bootstrap,
                        topic_prefix=prefix, partitions=TEST_PARTITIONS)
    with MemoryClient("acme", "a", settings=settings) as client:
        for i in range(3):
            client.message("s1", "user", f"note {i}")
    port = free_port()
    log = tmp_path / "run.log"
    worker = spawn_worker(settings, tmp_path / "stores", "--within", "0.05",
                          "--metrics-port", str(port), log_path=log)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 150
        while True:
            got = figures(url)
            applied = got.get(("memstack_events_applied_total", (("kind", "message"),)), 0)
            lag = {k: v for k, v in got.items() if k[0] == "memstack_consumer_lag"
                   and dict(k[1])["topic"] == settings.events_topic}
            if applied >= 3 and lag and set(lag.values()) == {0}:
                break
            assert worker.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, (got, log.read_text()[-3000:])
            time.sleep(0.5)
        assert got[("memstack_batch_seconds_count", ())] >= 1
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
