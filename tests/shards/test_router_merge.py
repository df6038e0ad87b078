"""The router's merge over real shard stores served by the shard API, without a broker.

A log of 4 partitions is projected by the real projector into one store and into one shard
per partition; two shard APIs (two "workers", two partitions each) serve the shards. Every
query kind for every tenant through the router equals the one store served as one shard, and
facts, history, records and vector search equal ``MemoryView`` on the one store. A worker that
is gone makes answers partial, naming its partitions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from memstack.jobs.bench.scale.workload import scale_log, tenant_name
from memstack.pipelines.embedding import shared_encoder
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.shards.layout import shard_dir
from memstack.pipelines.shards.projector import ShardedProjector
from memstack.pipelines.stores.bundle import Stores
from memstack.server.router.fanout import Fanout
from memstack.server.shards.api import shard_app
from memstack.server.shards.reads import ShardReader
from memstack.view.ops import Query as Q
from tests.jobs.bench.test_scale_bench import TOPIC, project, records_of
from tests.shards.deployment import FAR, direct_hashes, queries, routed, routed_hashes
from tests.view.serving import serve_in_thread

TENANTS = [tenant_name(i) for i in range(2)]
KNOWN = "2027-01-01T00:00:00Z"
CUT = "0:6,1:5,2:9,3:4"


def serve(stack: ExitStack, root: Path, partitions: list[int]) -> str:
    def open_shard(directory: Path) -> tuple[StoreProjector, Stores]:
        stores = Stores.open(directory)
        return StoreProjector(stores, shared_encoder(), TOPIC), stores

    sharded = ShardedProjector(root, open_shard, lambda: {})
    sharded.assign(partitions)
    stack.callback(sharded.close)
    return stack.enter_context(serve_in_thread(shard_app(sharded, ShardReader(shared_encoder()),
                                                         f"w{partitions}")))


@contextmanager
def single_and_sharded(tmp: Path, records: list[LogRecord]) -> Iterator[list[str]]:
    """``records`` projected into one store (``tmp/single``) and into four partition shards
    (``tmp/sharded``), the shards served by two workers (partitions 0-1 and 2-3): their URLs."""
    project(tmp / "single", records)
    for partition in range(4):
        project(shard_dir(tmp / "sharded", partition),
                [r for r in records if r.position.partition == partition])
    with ExitStack() as stack:
        yield [serve(stack, tmp / "sharded", [0, 1]), serve(stack, tmp / "sharded", [2, 3])]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    tmp = tmp_path_factory.mktemp("router")
    with single_and_sharded(tmp, records_of(scale_log(2, 4, 4, seed=21), 4)) as urls:
        yield tmp, urls


def test_routed_answers_equal_one_store(deployment: tuple[Path, list[str]]) -> None:
    tmp, urls = deployment
    qs = queries(KNOWN, CUT)
    fanout = Fanout(lambda: urls, [0, 1, 2, 3])
    try:
        sharded = routed_hashes(fanout, TENANTS, qs)
    finally:
        fanout.close()
    with ExitStack() as stack:  # the one store as one shard holding every partition
        def open_single(_: Path) -> tuple[StoreProjector, Stores]:
            stores = Stores.open(tmp / "single")
            return StoreProjector(stores, shared_encoder(), TOPIC), stores

        one = ShardedProjector(tmp / "one", open_single, lambda: {})
        one.assign([0])
        stack.callback(one.close)
        single = stack.enter_context(serve_in_thread(shard_app(
            one, ShardReader(shared_encoder()), "single")))
        reference = Fanout(lambda: [single], [0])
        stack.callback(reference.close)
        assert routed_hashes(reference, TENANTS, qs) == sharded
    comparable = [q for q in qs if q.op in ("facts", "history", "records")
                  or (q.op == "search" and getattr(q.params, "mode", None) == "vector")]
    with Stores.open(tmp / "single", read_only=True) as stores:
        direct = direct_hashes(stores, TENANTS, comparable)
    assert direct == {k: v for k, v in sharded.items() if k in direct}
    assert len(direct) == len(TENANTS) * len(comparable)


def test_a_missing_worker_makes_answers_partial(deployment: tuple[Path, list[str]]) -> None:
    _, urls = deployment
    fanout = Fanout(lambda: urls[:1], [0, 1, 2, 3])
    try:
        body, memory = routed(fanout, TENANTS[0], Q("records", FAR, KNOWN))
        assert memory.partial and memory.missing == {2, 3}
        assert {r["partition"] for r in body["records"]} <= {0, 1}
        body, memory = routed(fanout, TENANTS[0], Q("search", FAR, KNOWN, text="basil", k=3))
        assert memory.missing == {2, 3}
    finally:
        fanout.close()


def test_router_http_keys_partial_fields_and_after(deployment: tuple[Path, list[str]]) -> None:
    from fastapi.testclient import TestClient

    from memstack.server.api_keys import ApiKeys
    from memstack.server.router.app import router_app

    _, urls = deployment
    keys = ApiKeys.from_env({"MEMSTACK_API_KEYS": f"reader-key-1:{TENANTS[0]}:read"})
    fanout = Fanout(lambda: urls[:1], [0, 1, 2, 3])
    auth = {"Authorization": "Bearer reader-key-1"}
    try:
        with TestClient(router_app(fanout, keys, after_timeout_s=0.5)) as http:
            path = f"/v1/tenants/{TENANTS[0]}"
            assert http.get(f"{path}/facts").status_code == 401
            assert http.get(f"/v1/tenants/{TENANTS[1]}/facts", headers=auth).status_code == 403
            answer = http.get(f"{path}/records", headers=auth,
                              params={"valid": FAR, "known": KNOWN}).json()
            assert answer["partial"] is True and answer["missing_partitions"] == [2, 3]
            assert http.get(f"{path}/facts", headers=auth,
                            params={"after": "x1-2"}).status_code == 422
            waited = http.get(f"{path}/facts", headers=auth, params={"after": "e2-1"})
            assert waited.status_code == 504
            assert waited.json()["missing_partitions"] == [2]  # a problem document
            assert waited.headers["content-type"] == "application/problem+json"
            assert http.get(f"{path}/facts", headers=auth,
                            params={"after": "e0-1.f0-1"}).status_code == 504
            assert http.get(f"{path}/facts", headers=auth,
                            params={"after": "e0-1"}).json()["facts"] is not None
            shards = http.get("/v1/shards").json()
            assert shards["missing_partitions"] == [2, 3]
    finally:
        fanout.close()
