"""Against a real local Ray and the real broker: the feed produced through ``FeedProducer``,
actors that resume exactly once from their checkpoints, and Ray kept on loopback.

One Ray session for the module, at most two actors alive at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
import torch

from memstack.foundation.settings import Settings
from memstack.infra.ray import RayConfig, non_loopback_listeners, start_ray, stop_ray
from memstack.operators.log import LoggedEvent
from memstack.operators.memory import MemoryOperator
from memstack.pipelines.consolidation.actor import WorkerConfig, WorkerStatus, actor_class
from memstack.pipelines.consolidation.distill import Distiller, StoreTeacher
from memstack.pipelines.consolidation.feed import Sharding
from memstack.pipelines.consolidation.producer import (
    FeedProducer,
    ensure_feed_topic,
    publish_committed,
)
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from tests.consolidation.givens import SMALL
from tests.pipelines.helpers import builder, logged

WINDOW = 16


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    temp = Path("/tmp") / f"msr-{tmp_path_factory.getbasetemp().name}"
    resources = start_ray(RayConfig(num_cpus=2, num_gpus=0, temp_dir=temp))
    yield resources
    stop_ray()


def _batches() -> list[list[LoggedEvent]]:
    """Facts of a big tenant (2 shards) and a small one; then a wave of supersessions."""
    acme, globex = builder("acme"), builder("globex")
    cities = ["Lisbon", "Porto", "Faro", "Braga", "Evora", "Coimbra"]
    first = [logged(b.fact("s1", f"user:{i}", rel, f"{cities[(i + k) % 6]}"), t)
             for t, (b, i, k, rel) in enumerate(
                 (b, i, k, rel) for b in (acme, globex) for i in range(30)
                 for k, rel in enumerate(("lives_in", "works_in")))]
    later = [logged(acme.fact("s2", f"user:{i}", "lives_in", cities[(i + 3) % 6]), 200 + i)
             for i in range(0, 30, 2)]
    return [first[:50], first[50:], later]


def _produce(settings: Settings, encoder: MiniLMEncoder, tmp: Path) -> dict[int, int]:
    topic = ensure_feed_topic(settings)
    events = DuckDBEventIndex(tmp / "memstack.duckdb")
    producer = FeedProducer(settings.bootstrap, topic,
                            Distiller(StoreTeacher(events, encoder)), Sharding.parse("acme=2"))
    try:
        publish_committed(_batches(), MemoryOperator(), events, producer)
    finally:
        producer.close()
        events.close()
    from memstack.pipelines.log_reader import end_offsets

    return end_offsets(settings.bootstrap, topic)


def _worker(settings: Settings, root: Path, centre: torch.Tensor) -> WorkerConfig:
    return WorkerConfig(settings.bootstrap, f"{settings.topic_prefix}.consolidation", (0, 1, 2),
                        root, SMALL, centre, "cpu", WINDOW, checkpoint_every=10_000)


@pytest.mark.slow
def test_kill_and_resume_gives_the_weights_of_an_uninterrupted_run(
    local_ray: dict[str, object], topics: Settings, minilm: MiniLMEncoder,
    centre: torch.Tensor, tmp_path: Path,
) -> None:
    ends = _produce(topics, minilm, tmp_path)
    assert sum(ends.values()) > 3 * 2 * WINDOW
    actor = actor_class(0.0)

    whole = actor.remote(_worker(topics, tmp_path / "a", centre))
    expected: WorkerStatus = ray.get(whole.run.remote(ends, 120.0))
    assert non_loopback_listeners() == []  # Ray's processes listen on 127.0.0.1 only
    ray.kill(whole)
    assert expected.offsets == ends and expected.items > 0 and expected.bad == 0
    assert len(expected.digests) == 3  # acme#0, acme#1, globex

    mid = {p: min(o, 2 * WINDOW) for p, o in ends.items()}
    further = {p: min(o, 3 * WINDOW) for p, o in ends.items()}
    first = actor.remote(_worker(topics, tmp_path / "b", centre))
    ray.get(first.run_to.remote(mid))
    saved = ray.get(first.checkpoint.remote())
    ray.get(first.run_to.remote(further))  # applied, never checkpointed: lost with the actor
    ray.kill(first)

    resumed = actor.remote(_worker(topics, tmp_path / "b", centre))
    status: WorkerStatus = ray.get(resumed.status.remote())
    assert status.offsets == mid, saved
    final: WorkerStatus = ray.get(resumed.run.remote(ends, 120.0))
    ray.kill(resumed)
    assert final.offsets == ends and final.items == expected.items
    assert final.digests == expected.digests  # bit-identical weights, every shard
