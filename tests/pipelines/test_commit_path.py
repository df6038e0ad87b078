"""The commit path runs its steps in the documented order, and encodes each text once per batch.

Real stores (DuckDB + LanceDB in a temporary directory), the real model behind a counting
wrapper, the real session-state updater; the state's changelog and the consolidation feed are
small recording objects (they would be Kafka topics), each checking what the stores hold at the
moment its step runs.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from memstack.pipelines.commit_path import CommitPath, memory_rows
from memstack.pipelines.consolidation.feeding import FeedStep
from memstack.pipelines.contracts import Plan
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.session_state.projector import SessionStateStep
from memstack.pipelines.session_state.table import SessionStateUpdater
from memstack.pipelines.stores.base import Vectors
from memstack.pipelines.stores.bundle import Stores
from tests.pipelines.helpers import TOPIC, at, builder, record, year


def batch() -> list[LogRecord]:
    b = builder()
    return [
        record(b.message("s1", "user", "I moved to Lisbon last spring", occurred_at=at(0)), 0),
        record(b.fact("s1", "ana", "lives_in", "Lisbon", valid_from=year(2024)), 1),
        record(b'{"kind": "message", "tenant": "acme"}', 2),
        record(b.note("s1", "I moved to Lisbon last spring"), 3),  # the same text again
        record(b.tool_result("s2", "weather", "c1", "sunny, 24 degrees"), 0, partition=1),
        record(b.note("s2", "Ana prefers trains over planes"), 1, partition=1),
    ]


class CountingEncoder:
    """The real model; every text it is asked to encode is recorded, call by call."""

    def __init__(self, inner: MiniLMEncoder, order: list[str]) -> None:
        self.inner, self.order = inner, order
        self.calls: list[list[str]] = []

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        self.order.append("vectors")
        return self.inner.encode(texts)


class Changelog:
    """The session state's changelog: snapshots by key; a flush notes what the stores hold."""

    def __init__(self, stores: Stores, order: list[str]) -> None:
        self.stores, self.order = stores, order
        self.snapshots: dict[str, bytes | None] = {}
        self.offsets_at_flush: list[dict[int, int]] = []

    def get(self, key: str) -> bytes | None:
        return self.snapshots.get(key)

    def send(self, partition: int, key: str, value: bytes | None) -> None:
        self.snapshots[key] = value

    async def flush(self) -> None:
        self.order.append("session state")
        self.offsets_at_flush.append(self.stores.events.applied_offsets(TOPIC))


class Feed(FeedStep):
    """The feed step with the broker left out: notes what the stores and the path hold."""

    def __init__(self, path: list[CommitPath], order: list[str]) -> None:
        self.path, self.order = path, order
        self.seen: list[tuple[dict[int, int], dict[int, int]]] = []

    def apply(self, plan: Plan) -> None:
        self.order.append("consolidation feed")
        path = self.path[0]
        self.seen.append((path.store.stores.events.applied_offsets(TOPIC),
                          path.applied_offsets()))


def commit_path(stores: Stores, minilm: MiniLMEncoder,
                order: list[str]) -> tuple[CommitPath, CountingEncoder, Changelog, Feed]:
    encoder = CountingEncoder(minilm, order)
    changelog = Changelog(stores, order)
    holder: list[CommitPath] = []
    feed = Feed(holder, order)
    state = SessionStateStep(SessionStateUpdater(changelog, changelog, encoder), asyncio.run)
    path = CommitPath(StoreProjector(stores, encoder, TOPIC), state=state, feed=feed)
    holder.append(path)
    return path, encoder, changelog, feed


def test_steps_run_in_the_documented_order(tmp_path: Path, minilm: MiniLMEncoder) -> None:
    order: list[str] = []
    with Stores.open(tmp_path / "s") as stores:
        path, _, changelog, feed = commit_path(stores, minilm, order)
        plan = path.prepare(batch())
        assert order == []  # prepare (decode, forget filter, operators) embeds nothing
        path.commit(plan)

        assert order == ["vectors", "session state", "consolidation feed"]
        # The state was acknowledged while the stores still held nothing of the batch ...
        assert changelog.offsets_at_flush == [{}]
        assert changelog.snapshots.keys() == {"acme/s1", "acme/s2"}
        # ... and the feed ran once the stores and the path's offsets had moved on.
        assert feed.seen == [({0: 4, 1: 2}, {0: 4, 1: 2})]
        assert stores.events.counts()["records"] == 4
        assert stores.vectors.count() == 4


def test_each_text_is_encoded_once_per_batch(tmp_path: Path, minilm: MiniLMEncoder) -> None:
    order: list[str] = []
    with Stores.open(tmp_path / "s") as stores:
        path, encoder, _, _ = commit_path(stores, minilm, order)
        plan = path.prepare(batch())
        path.commit(plan)

        assert len(encoder.calls) == 1  # one call for the stores and the session state
        counts = Counter(encoder.calls[0])
        assert set(counts.values()) == {1}
        memory_texts = {row.text for row in memory_rows(plan)}
        assert memory_texts <= counts.keys()
        assert {"ana lives_in", "Lisbon"} <= counts.keys()  # the state's fact key and value
        assert path.vector_counts.encoded == len(counts)



def test_vectors_the_plan_carries_are_not_encoded(tmp_path: Path,
                                                  minilm: MiniLMEncoder) -> None:
    """A replay's parallel stage hands in vectors with the plan: the writer encodes the rest."""
    order: list[str] = []
    with Stores.open(tmp_path / "s") as stores:
        encoder = CountingEncoder(minilm, order)
        path = CommitPath(StoreProjector(stores, encoder, TOPIC))
        plan = path.prepare(batch())
        first = memory_rows(plan)[0].text
        given = {first: minilm.encode([first])[0]}
        path.commit(Plan(plan.events, plan.mutations, plan.dead_letters, plan.next_offsets,
                         given))

        assert [first not in call for call in encoder.calls] == [True]
        assert path.vector_counts.given == 1
        assert stores.vectors.count() == 4
