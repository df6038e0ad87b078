"""Sharded live workers against the real broker, stores and model (slow).

Three ``memstack shards worker`` processes over six partitions ingest a log whose fact keys
straddle partitions; every query kind for every tenant, at a time and at a log cut, answers
through the router what one store over the same log answers. Then a worker is killed with
``kill -9`` while events stream: until the rebalance and catch-up every answer that is not
flagged partial equals the reference, at least one is flagged; afterwards all answers equal
the new reference again, and again after a fourth worker joins and partitions move back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memstack.foundation.settings import Settings
from memstack.jobs.bench.scale.workload import scale_log, tenant_name
from memstack.jobs.shards import discover_workers, spawn_shard_worker, wait_for_cards
from memstack.pipelines.stores.bundle import Stores
from memstack.server.api_keys import ApiKeys
from memstack.server.router.app import router_app
from memstack.server.router.fanout import Fanout
from memstack.view.ops import Query as Q
from tests.conftest import KafkaUnderTest, settings_on_fresh_topics
from tests.shards.deployment import (
    FAR,
    answer_hash,
    build_reference,
    direct_hashes,
    emit,
    one_shard,
    queries,
    routed,
    routed_hashes,
    stop_workers,
    wait_complete,
)

PARTITIONS = 6
TENANTS = [tenant_name(i) for i in range(3)]
@pytest.fixture
def six(kafka: KafkaUnderTest, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return settings_on_fresh_topics(kafka, tmp_path_factory.mktemp("home"), "t-shards",
                                    PARTITIONS)


def compare(settings: Settings, fanout: Fanout, scratch: Path, qs: list[Q]) -> None:
    """Routed answers == the single store's (as one shard, and directly where comparable)."""
    single = build_reference(settings, scratch / "single")
    sharded = routed_hashes(fanout, TENANTS, qs)
    with one_shard(settings, single, scratch / "one") as one:
        assert routed_hashes(one, TENANTS, qs) == sharded
    # BM25 (bm25, hybrid, context) ranks with the router's statistics, not LanceDB's: those
    # compare with the one-shard router above; the rest also with MemoryView itself.
    comparable = [q for q in qs if q.op in ("facts", "history", "records")
                  or (q.op == "search" and getattr(q.params, "mode", None) == "vector")]
    with Stores.open(single, read_only=True) as stores:
        direct = direct_hashes(stores, TENANTS, comparable)
    assert direct == {k: v for k, v in sharded.items() if k in direct}


def straddling_keys(settings: Settings, events: list[object], ends: dict[int, int]) -> int:
    """How many fact keys have entries on more than one partition (the scenario needs some)."""
    from memstack.pipelines.log_reader import read_bounded
    from tests.logged import open_logged

    where: dict[tuple[str, str | None, str], set[int]] = {}
    for record in read_bounded(settings.bootstrap, settings.events_topic, None, ends):
        event = open_logged(settings, record.value)
        relation = event.payload.model_dump().get("relation")
        if relation:
            where.setdefault((event.tenant, event.subject, relation), set()).add(
                record.position.partition)
    return sum(1 for parts in where.values() if len(parts) > 1)


def wait_owners(fanout: Fanout, workers: int, timeout_s: float = 120.0) -> None:
    """Wait until ``workers`` distinct workers own partitions (every one has joined)."""
    deadline = time.monotonic() + timeout_s
    while len(set(fanout.coverage().owners.values())) < workers:
        assert time.monotonic() < deadline, f"fewer than {workers} workers own partitions"
        time.sleep(0.5)


def stream(settings: Settings, events: list[object], every_s: float) -> threading.Thread:
    def send() -> None:
        for i in range(0, len(events), 6):
            emit(settings, events[i:i + 6])  # type: ignore[arg-type]
            time.sleep(every_s)
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_three_workers_answer_as_one_store_through_kill_and_join(six: Settings,
                                                                 tmp_path: Path) -> None:
    first, second = scale_log(3, 4, 6, seed=11), scale_log(3, 4, 4, seed=12)
    second = [e.model_copy(update={"session": f"{e.session}-b"}) for e in second]
    emit(six, first)
    root, logs = tmp_path / "sharded", tmp_path / "logs"
    logs.mkdir()
    workers: dict[str, subprocess.Popen[bytes]] = {
        name: spawn_shard_worker(six, root, name, logs / f"{name}.log", "--within", "0.1")
        for name in ("w1", "w2", "w3")}
    fanout = Fanout(discover_workers(root, []), list(range(PARTITIONS)))
    try:
        wait_for_cards(root, list(workers))
        wait_owners(fanout, 3)
        coverage = wait_complete(fanout, six)
        ends = dict(coverage.applied)
        assert straddling_keys(six, first, ends) >= 3
        known = datetime.now(UTC).isoformat()
        cut = ",".join(f"{p}:{max(0, o - 3)}" for p, o in sorted(ends.items()))
        compare(six, fanout, tmp_path / "ref1", queries(known, cut))

        # HTTP: keys, after= and the partial fields
        keys = ApiKeys.from_env({"MEMSTACK_API_KEYS": "key-one-1:tenant0:read"})
        token = ".".join(f"e{p}-{o}" for p, o in sorted(ends.items()))
        with TestClient(router_app(fanout, keys, after_timeout_s=5)) as http:
            answer = http.get("/v1/tenants/tenant0/facts", headers={"X-API-Key": "key-one-1"},
                              params={"after": token, "valid": FAR, "known": known})
            assert answer.status_code == 200, answer.text
            assert answer.json()["partial"] is False
            body, _ = routed(fanout, "tenant0", Q("facts", FAR, known))
            assert answer_hash(answer.json()) == answer_hash(body)
            assert http.get("/v1/tenants/tenant1/facts",
                            headers={"X-API-Key": "key-one-1"}).status_code == 403
            late = ".".join(f"e{p}-{o + 1000}" for p, o in sorted(ends.items()))
            assert http.get("/v1/tenants/tenant0/records", headers={"X-API-Key": "key-one-1"},
                            params={"after": late}).status_code == 504

        # kill -9 one worker while events stream in
        before = Q("records", FAR, known)
        expected = {t: answer_hash(routed(fanout, t, before)[0]) for t in TENANTS}
        sender = stream(six, second, 0.5)
        time.sleep(1.0)
        os.kill(workers["w2"].pid, signal.SIGKILL)
        workers["w2"].wait(10)
        partial = complete = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for tenant in TENANTS:
                body, memory = routed(fanout, tenant, before)
                if memory.partial:
                    partial += 1
                    assert memory.missing or memory.catching_up
                else:
                    complete += 1
                    assert answer_hash(body) == expected[tenant], "silently partial answer"
            coverage = fanout.coverage()
            if not sender.is_alive() and not coverage.missing and not coverage.catching_up \
                    and len(set(coverage.owners.values())) == 2:
                break
            time.sleep(0.3)
        sender.join(60)
        assert partial >= 1, "the dead worker's partitions were never reported missing"
        wait_complete(fanout, six)
        known2 = datetime.now(UTC).isoformat()
        cut2 = ",".join(f"{p}:{o}" for p, o in sorted(ends.items()))
        compare(six, fanout, tmp_path / "ref2", queries(known2, cut2))

        # a worker joins: partitions move (their owners close, it opens), answers stay equal
        workers["w4"] = spawn_shard_worker(six, root, "w4", logs / "w4.log", "--within", "0.1")
        wait_for_cards(root, ["w4"])
        wait_owners(fanout, 3)
        wait_complete(fanout, six)
        compare(six, fanout, tmp_path / "ref3", queries(known2, cut2))
    finally:
        fanout.close()
        stop_workers(workers, logs)
