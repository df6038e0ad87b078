"""Helpers of the sharding tests: a sharded deployment of real workers, the single-store
reference, and the query set whose answers are compared (as content hashes)."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.pipelines.embedding import shared_encoder
from memstack.pipelines.log_reader import end_offsets
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.rebuild import rebuild
from memstack.pipelines.shards.projector import ShardedProjector
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event
from memstack.server.router.fanout import Coverage, Fanout
from memstack.server.router.view import RoutedMemory
from memstack.server.shards.api import shard_app
from memstack.server.shards.reads import ShardReader
from memstack.view.memory_view import MemoryView
from memstack.view.ops import Query as Q
from memstack.view.ops import execute, to_json
from tests.view.serving import serve_in_thread

FAR = "2035-01-01T00:00:00Z"
MID = "2022-06-01T00:00:00Z"


def emit(settings: Settings, events: list[Event]) -> dict[int, int]:
    """Send ``events``; the next offset per partition they reached."""
    with MemoryClient("_", "shard-test", settings=settings) as client:
        written = [p.get() for p in client.emit_many(events)]
    out: dict[int, int] = {}
    for w in written:
        out[w.partition] = max(out.get(w.partition, 0), w.offset + 1)
    return out


def queries(known: str, cut: str) -> list[Q]:
    """Every query kind, at fixed coordinates (a time and a log cut), so answers compare."""
    out: list[Q] = []
    for at in (known, cut):
        out += [Q("facts", FAR, at), Q("facts", MID, at, subject="user:ana"),
                Q("facts", MID, at, relation="lives_in"),
                Q("history", FAR, at, subject="user:ana"),
                Q("history", FAR, at, subject="user:ben", relation="works_in"),
                Q("records", FAR, at), Q("records", FAR, at, session="s1", limit=4),
                Q("search", FAR, at, text="tomato seedlings near Lisbon", k=5, mode="vector"),
                Q("search", FAR, at, text="violin lessons Oslo", k=6, mode="bm25"),
                Q("search", FAR, at, text="ana talked about the basil pots", k=5),
                Q("context", FAR, at, text="where does ana live", budget_tokens=300)]
    return out


def label(query: Q) -> str:
    return json.dumps({"op": query.op, **query.params_json()}, sort_keys=True)


def _rounded(value: Any) -> Any:
    """Floats to 4 decimals (the stores' vector tolerance): embeddings of one text differ in
    the last bits between encoder batches."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def answer_hash(answer: dict[str, Any]) -> str:
    body = {k: v for k, v in answer.items()
            if k not in ("partial", "missing_partitions", "catching_up")}
    text = json.dumps(_rounded(body), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def routed(fanout: Fanout, tenant: str, query: Q) -> tuple[dict[str, Any], RoutedMemory]:
    memory = RoutedMemory(tenant, fanout)
    return to_json(execute(memory, query)), memory  # type: ignore[arg-type]  # duck-typed


def routed_hashes(fanout: Fanout, tenants: list[str], qs: list[Q]) -> dict[str, str]:
    out: dict[str, str] = {}
    for tenant in tenants:
        for query in qs:
            body, memory = routed(fanout, tenant, query)
            assert not memory.partial, (label(query), memory.missing, memory.catching_up)
            out[f"{tenant} {label(query)}"] = answer_hash(body)
    return out


def direct_hashes(stores: Stores, tenants: list[str], qs: list[Q]) -> dict[str, str]:
    """The single store's own answers (``MemoryView``, what ``memstack serve`` answers)."""
    return {f"{t} {label(q)}": answer_hash(to_json(execute(
        MemoryView(t, stores, encoder=shared_encoder()), q))) for t in tenants for q in qs}


def build_reference(settings: Settings, directory: Path) -> Path:
    """One store over the whole log, by the same projector (``rebuild``)."""
    rebuild(settings.bootstrap, settings.events_topic, directory, encoder=shared_encoder(),
            keys=FileKeyStore(settings.keys_dir))
    return directory


@contextmanager
def one_shard(settings: Settings, single: Path, scratch: Path) -> Iterator[Fanout]:
    """The single store served as one shard holding every partition, to the same router merge:
    the 1-worker answers of the router's own algebra (BM25 with its statistics)."""
    def open_single(_: Path) -> tuple[StoreProjector, Stores]:
        stores = Stores.open(single)
        return StoreProjector(stores, shared_encoder(), settings.events_topic), stores

    sharded = ShardedProjector(scratch, open_single, lambda: {})
    sharded.assign([0])
    try:
        with serve_in_thread(shard_app(sharded, ShardReader(shared_encoder()), "single")) as url:
            fanout = Fanout(lambda: [url], [0])
            try:
                yield fanout
            finally:
                fanout.close()
    finally:
        sharded.close()


def wait_complete(fanout: Fanout, settings: Settings, timeout_s: float = 240.0) -> Coverage:
    """Wait until every partition is owned, no shard catches up and all reached the log end."""
    ends = end_offsets(settings.bootstrap, settings.events_topic)
    deadline = time.monotonic() + timeout_s
    while True:
        coverage = fanout.coverage()
        done = (not coverage.missing and not coverage.catching_up
                and all(coverage.applied.get(p, 0) >= e for p, e in ends.items()))
        if done:
            return coverage
        assert time.monotonic() < deadline, f"not complete: {coverage}, ends {ends}"
        time.sleep(0.5)


def stop_workers(workers: dict[str, subprocess.Popen[bytes]], logs: Path) -> None:
    """SIGTERM every worker still running, wait up to 60 s each (then kill), and print each
    one's log tail (pytest shows it when the test failed)."""
    for child in workers.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for name, child in workers.items():
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
        print(name, (logs / f"{name}.log").read_text()[-1500:])
