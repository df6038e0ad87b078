"""``memstack serve --readers N`` on a real broker, stores and model: reads answered by reader
processes over the snapshots the writer publishes (docs/service.md, "Reader processes").

- every acknowledged write is read back through the one URL with its token, by every reader;
- a forget's token hides the content in every reader;
- kill -9 of a reader under load loses nothing: the others keep answering and it is restarted;
- kill -9 of the writer: the readers keep answering from the last snapshot and say ``stale``
  in ``/healthz``, writes answer 503; a restarted writer's snapshots bring them up to date,
  and the orphaned readers stop once the new writer's own readers serve.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from memstack.foundation.settings import Settings
from tests.conftest import KafkaUnderTest
from tests.service.conftest import (
    KEYS,
    Service,
    event,
    fact,
    fresh_settings,
    start_service,
    stop_service,
)

pytestmark = pytest.mark.timeout(600)


def readers_of(settings: Settings) -> list[int]:
    found: list[int] = json.loads((settings.home / "service.json").read_text())["readers"]
    return found


def fresh_client(url: str) -> httpx.Client:
    """A client on a new connection: the kernel hands each connection to one reader."""
    return httpx.Client(base_url=url, timeout=60.0,
                        headers={"Authorization": f"Bearer {KEYS['acme']}"})


def answering_pids(url: str, connections: int = 12) -> set[int]:
    pids = set()
    for _ in range(connections):
        with fresh_client(url) as client:
            body = client.get("/healthz").json()
            assert body["process"] == "reader", body
            pids.add(body["pid"])
    return pids


def serving(url: str, count: int, timeout_s: float = 60.0) -> set[int]:
    """The readers answering once ``count`` of them do (a reader starts in a few seconds,
    connections wait in the socket's backlog meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = answering_pids(url)
        if len(pids) >= count or time.monotonic() > deadline:
            return pids
        time.sleep(0.5)


def write(client: httpx.Client, events: list[dict[str, Any]]) -> str:
    response = client.post("/v1/tenants/acme/events", json={"events": events})
    assert response.status_code == 200, response.text
    position: str = response.json()["position"]
    return position


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of this process counts as gone
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def readers(kafka: KafkaUnderTest, tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[Service]:
    settings = fresh_settings(kafka, tmp_path_factory)
    log = tmp_path_factory.mktemp("readers-log") / "serve.log"
    running = start_service(settings, log, "--readers", "2")
    try:
        yield running
    finally:
        pids = readers_of(settings) if (settings.home / "service.json").exists() else []
        assert stop_service(running) == 0, running.log_tail()
        assert not any(alive(p) for p in pids), "a reader outlived its writer's clean stop"


def test_every_reader_reads_each_acknowledged_write_after_its_token(readers: Service) -> None:
    assert len(serving(readers.url, 2)) == 2  # both readers take connections
    with readers.client() as writer:
        for i in range(6):
            position = write(writer, [event("acme", "s-ryw", f"my locker number is {i}"),
                                      fact("acme", "user:rui", "locker", f"L{i}")])
            with fresh_client(readers.url) as client:  # another connection, maybe reader
                facts = client.get("/v1/tenants/acme/facts", params={
                    "after": position, "subject": "user:rui"}).json()["facts"]
                assert [f["object"] for f in facts] == [f"L{i}"]
                rows = client.get("/v1/tenants/acme/records", params={
                    "after": position, "session": "s-ryw"}).json()["records"]
                assert len(rows) == i + 1
                hits = client.get("/v1/tenants/acme/search", params={
                    "after": position, "text": "locker number", "k": 10,
                    "session": "s-ryw"}).json()["hits"]
                assert f"my locker number is {i}" in {h["memory"]["text"] for h in hits}


def test_a_forget_token_hides_the_content_in_every_reader(readers: Service) -> None:
    secret = "the safe opens with 9931"
    with readers.client() as writer:
        asserted = {**fact("acme", "user:safe", "code", "9931"), "session": "s-secret"}
        position = write(writer, [event("acme", "s-secret", secret), asserted])
        assert writer.get("/v1/tenants/acme/records", params={
            "after": position, "session": "s-secret"}).json()["records"]
        response = writer.post("/v1/tenants/acme/forget", json={
            "scope": {"type": "session", "session": "s-secret"}, "reason": "user asked"})
        assert response.status_code == 200, response.text
        forgot = response.json()["position"]
    seen = set()
    for _ in range(10):
        with fresh_client(readers.url) as client:
            seen.add(client.get("/healthz").json()["pid"])
            params = {"after": forgot}
            assert client.get("/v1/tenants/acme/records", params={
                **params, "session": "s-secret"}).json()["records"] == []
            hits = client.get("/v1/tenants/acme/search", params={
                **params, "text": "safe opens with", "k": 10}).json()["hits"]
            assert all(secret not in h["memory"]["text"] for h in hits)
            facts = client.get("/v1/tenants/acme/facts", params={
                **params, "subject": "user:safe"}).json()["facts"]
            assert facts == []
    assert len(seen) == 2


def test_kill_9_of_a_reader_under_load_loses_nothing(readers: Service) -> None:
    victim = readers_of(readers.settings)[0]
    written: list[tuple[str, str]] = []
    failed_reads = 0
    writer = readers.client()
    try:
        for i in range(20):
            if i == 5:
                os.kill(victim, signal.SIGKILL)
            text = f"parcel {i} is at the front desk"
            sent = [event("acme", "s-kill", text)]
            try:
                position = write(writer, sent)
            except httpx.TransportError:  # its connection was the killed reader's: the
                writer.close()            # retry (same event id) duplicates nothing
                writer = readers.client()
                position = write(writer, sent)
            written.append((text, position))
            try:
                with fresh_client(readers.url) as client:
                    rows = client.get("/v1/tenants/acme/records", params={
                        "after": written[-1][1], "session": "s-kill"}).json()["records"]
                    assert len(rows) == i + 1
            except httpx.TransportError:  # a connection the killed reader had accepted
                failed_reads += 1
    finally:
        writer.close()
    assert failed_reads <= 2
    pids = serving(readers.url, 2)
    assert victim not in pids and len(pids) == 2, pids  # the writer started another
    with fresh_client(readers.url) as client:
        rows = client.get("/v1/tenants/acme/records", params={
            "after": written[-1][1], "session": "s-kill"}).json()["records"]
    assert {r["text"] for r in rows} == {text for text, _ in written}


def test_readers_outlive_a_killed_writer_and_follow_its_restart(
        kafka: KafkaUnderTest, tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = fresh_settings(kafka, tmp_path_factory)
    log = tmp_path_factory.mktemp("writer-kill") / "serve.log"
    first = start_service(settings, log, "--readers", "1")
    port = first.url.rsplit(":", 1)[1]
    orphans = readers_of(settings)
    second: Service | None = None
    try:
        with first.client() as client:
            before = write(client, [fact("acme", "user:eva", "city", "Porto")])
            assert client.get("/v1/tenants/acme/facts", params={
                "after": before, "subject": "user:eva"}).json()["facts"]
        first.process.kill()
        first.process.wait()
        time.sleep(4)  # past the heartbeat's stale mark
        with fresh_client(first.url) as client:
            health = client.get("/healthz").json()
            assert health["status"] == "stale" and health["pid"] in orphans, health
            facts = client.get("/v1/tenants/acme/facts", params={"subject": "user:eva"})
            assert [f["object"] for f in facts.json()["facts"]] == ["Porto"]
            refused = client.post("/v1/tenants/acme/events", json={
                "events": [fact("acme", "user:eva", "city", "Braga")]})
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"] == "1"
        second = start_service(settings, log, "--readers", "1", "--port", port)
        with second.client() as client:
            after = write(client, [fact("acme", "user:eva", "city", "Faro")])
            facts = client.get("/v1/tenants/acme/facts", params={
                "after": after, "subject": "user:eva"}).json()["facts"]
            assert [f["object"] for f in facts] == ["Faro"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(alive(p) for p in orphans):
            time.sleep(0.5)
        assert not any(alive(p) for p in orphans), "an orphaned reader did not stop"
        with fresh_client(second.url) as client:
            assert client.get("/healthz").json()["status"] == "ok"
    finally:
        for pid in orphans:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if second is not None:
            assert stop_service(second) == 0, second.log_tail()
