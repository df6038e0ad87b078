"""Metadata filters through the shard router: a log of 4 partitions with metadata on every
note, projected into one store and into one shard per partition, two shard APIs serving the
shards. Filtered records, searches (each mode) and contexts through the router, now and as of a
past known time, select exactly the rows the Python form of the filter selects among the rows
known then, and equal the one store's answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.pipelines.embedding import shared_encoder
from memstack.schemas.events import Event
from memstack.schemas.filters import matches, parse_filter
from memstack.server.router.fanout import Fanout
from memstack.server.router.view import RoutedMemory
from memstack.view import MemoryView
from memstack.view.errors import InvalidFilterError
from tests.jobs.bench.test_scale_bench import T0, records_of
from tests.shards.test_router_merge import single_and_sharded

NOTES = 24
PAST = T0 + timedelta(seconds=NOTES // 2 - 0.5)
"""Known then: the first half of the notes (the log puts note i at T0 + i seconds)."""
FILTERS: list[dict[str, Any]] = [
    {"team": "red"},
    {"team": {"ne": "red"}},
    {"level": {"in": [1, 3]}},
    {"level": {"nin": [1, 3]}},
    {"level": {"gt": 2}},
    {"level": {"gte": 2}},
    {"level": {"lt": 2}},
    {"level": {"lte": 2}},
    {"labels": {"contains": "urgent"}},
    {"and": [{"team": "blue"}, {"level": {"gte": 1}}]},
    {"or": [{"team": "red"}, {"labels": {"contains": "urgent"}}]},
    {"not": {"or": [{"team": "red"}, {"level": 0}]}},
]


def _meta(i: int) -> dict[str, Any]:
    return {"team": ["red", "blue", "green"][i % 3], "level": i % 4,
            "labels": ["urgent"] if i % 5 == 0 else ["later", i]}


def events() -> list[Event]:
    build = EventBuilder(Defaults(tenant="acme", agent="helper", source="test"))
    return [build.note(f"s{i % 6}", f"ticket {i}: the printer on floor two is jammed again",
                       occurred_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=i),
                       metadata=_meta(i)) for i in range(NOTES)]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    tmp = tmp_path_factory.mktemp("router-filters")
    records = records_of(events(), 4)
    assert len({r.position.partition for r in records}) > 2  # spread over the shards
    with single_and_sharded(tmp, records) as urls:
        yield tmp, urls


def _ticket(text: str) -> int:
    return int(text.split("ticket ")[1].split(":")[0])


def _expected(spec: dict[str, Any], known: range) -> set[int]:
    f = parse_filter(spec)
    return {i for i in known if matches(f, _meta(i))}


@pytest.mark.parametrize("spec", FILTERS, ids=[str(f) for f in FILTERS])
def test_routed_filters_select_what_python_does_now_and_as_of(
        deployment: tuple[Path, list[str]], spec: dict[str, Any]) -> None:
    _, urls = deployment
    fanout = Fanout(lambda: urls, [0, 1, 2, 3])
    try:
        for known, notes in ((None, range(NOTES)), (PAST, range(NOTES // 2))):
            view = RoutedMemory("acme", fanout).as_of(None, known)
            expected = _expected(spec, notes)
            records = view.records(filter=spec)
            assert {_ticket(r.text or "") for r in records} == expected
            assert all(r.metadata == _meta(_ticket(r.text or "")) for r in records)
            for mode in ("hybrid", "bm25", "vector"):
                hits = view.search("printer jammed", NOTES, mode=mode, filter=spec)  # type: ignore[arg-type]
                assert {_ticket(h.memory.text) for h in hits} == expected, mode
    finally:
        fanout.close()


def test_routed_equals_one_store_and_context_filters(deployment: tuple[Path, list[str]]) -> None:
    tmp, urls = deployment
    spec = {"or": [{"team": "red"}, {"labels": {"contains": "urgent"}}]}
    fanout = Fanout(lambda: urls, [0, 1, 2, 3])
    from memstack.pipelines.stores.bundle import Stores

    try:
        routed = RoutedMemory("acme", fanout).as_of(None, PAST)
        with Stores.open(tmp / "single", read_only=True) as stores:
            single = MemoryView("acme", stores, encoder=shared_encoder()).as_of(None, PAST)
            assert routed.records(filter=spec) == single.records(filter=spec)
            routed_hits = routed.search("printer", 5, mode="vector", filter=spec)
            single_hits = single.search("printer", 5, mode="vector", filter=spec)
            assert [h.memory for h in routed_hits] == [h.memory for h in single_hits]
        context = routed.context("printer jammed", 3000, session="s0", filter=spec)
        cited = {_ticket(i.text) for i in context.items if "ticket " in i.text}
        assert cited and cited <= _expected(spec, range(NOTES // 2))
        with pytest.raises(InvalidFilterError, match="'gt' on 'level'"):
            routed.records(filter={"level": {"gt": None}})
    finally:
        fanout.close()
