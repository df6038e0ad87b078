"""Tenants never see each other: any query of any tenant returns only that tenant's rows.

Hypothesis draws a log of facts, retractions, notes and messages spread over a few tenants
(names chosen to be confusable: prefixes of each other, quotes, SQL-ish text) and partitions,
projects it into real stores (DuckDB + LanceDB, real MiniLM embeddings), then runs random
queries of every kind for random tenants at random as-of coordinates. Every row returned must
belong to the asking tenant, and every event id must be one that tenant emitted.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.operators.log import LogPosition
from memstack.pipelines.embedding import MiniLMEncoder, shared_encoder
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event
from memstack.view import LogCut, MemoryView
from tests.view.givens import project

TENANTS = ("a", "ab", "a'b", "b' OR '1'='1", "B")
SUBJECTS = ("ana", "bob", "ana'")
WORDS = ("moved", "to", "Porto", "Lisbon", "likes", "tea", "works", "at", "Acme", "a'b")
T0 = datetime(2025, 1, 1, tzinfo=UTC)
V0 = datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    return shared_encoder().load()


@st.composite
def logs(draw: st.DrawFn) -> list[tuple[Event, LogPosition]]:
    n = draw(st.integers(min_value=4, max_value=24))
    placed: list[tuple[Event, LogPosition]] = []
    offsets = [0, 0, 0]
    for i in range(n):
        tenant = draw(st.sampled_from(TENANTS))
        b = EventBuilder(Defaults(tenant=tenant, agent="x", source="prop"))
        session = f"s{draw(st.integers(0, 2))}"
        subject = draw(st.sampled_from(SUBJECTS))
        vt = V0 + timedelta(days=draw(st.integers(0, 60)))
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=5)))
        kind = draw(st.sampled_from(("fact", "retract", "note", "message")))
        if kind == "fact":
            event = b.fact(session, subject, draw(st.sampled_from(("lives_in", "likes"))),
                           draw(st.sampled_from(("Porto", "Lisbon", "tea"))), valid_from=vt)
        elif kind == "retract":
            event = b.retract(session, subject, "lives_in", valid_from=vt)
        elif kind == "note":
            event = b.note(session, text, subject=subject, occurred_at=vt)
        else:
            event = b.message(session, "user", text, occurred_at=vt)
        partition = draw(st.integers(0, 2))
        placed.append((event, LogPosition(T0 + timedelta(seconds=i), partition,
                                          offsets[partition])))
        offsets[partition] += 1
    return placed


@st.composite
def coordinates(draw: st.DrawFn) -> tuple[datetime, datetime | LogCut]:
    valid = V0 + timedelta(days=draw(st.integers(-5, 90)))
    if draw(st.booleans()):
        return valid, T0 + timedelta(seconds=draw(st.integers(-1, 30)))
    return valid, LogCut.of({p: draw(st.integers(0, 10)) for p in range(3)
                             if draw(st.booleans())})


def _check(rows: Sequence[object], tenant: str, owner: dict[str, str], attr: str) -> None:
    for row in rows:
        assert row.tenant == tenant  # type: ignore[attr-defined]
        assert owner[getattr(row, attr)] == tenant


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(placed=logs(), data=st.data())
def test_queries_never_return_another_tenants_rows(encoder: MiniLMEncoder,
                                                   placed: list[tuple[Event, LogPosition]],
                                                   data: st.DataObject) -> None:
    owner = {e.event_id: e.tenant for e, _ in placed}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "stores"
        project(directory, placed, encoder)
        with Stores.open(directory, read_only=True) as stores:
            for _ in range(8):
                tenant = data.draw(st.sampled_from(TENANTS), label="tenant")
                valid, known = data.draw(coordinates(), label="as_of")
                view = MemoryView(tenant, stores, encoder=encoder).as_of(valid, known)
                subject = data.draw(st.sampled_from((None, *SUBJECTS)), label="subject")
                _check(view.facts(subject), tenant, owner, "source_event_id")
                _check(view.history(subject or "ana"), tenant, owner, "source_event_id")
                _check(view.records(data.draw(st.sampled_from((None, "s0", "s1")))), tenant,
                       owner, "event_id")
                text = " ".join(data.draw(st.lists(st.sampled_from(WORDS), min_size=1,
                                                   max_size=3), label="text"))
                hits = view.search(text, data.draw(st.integers(1, 30)), subject=subject)
                _check([h.memory for h in hits], tenant, owner, "event_id")
                context = view.context(text, data.draw(st.integers(1, 400)), session="s0")
                for item in context.items:
                    assert item.event_id is None or owner[item.event_id] == tenant
