"""The key index of facts (memstack.view.points) answers exactly what DuckDB's general plan
answers: current, as of past valid and known times and log cuts, while batches commit
(supersession, corrections, late facts, retractions), after forgets; and a forgotten fact
never comes out of it. Real DuckDB files, the real memory operator and the real forget store.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from memstack.foundation.log_coordinates import LogCut
from memstack.operators.log import LoggedEvent
from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import DeleteFactVersion, FactVersion
from memstack.pipelines.forgetting.duckdb_store import DuckDBForgetStore
from memstack.pipelines.stores import duckdb_asof
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.view.points import FactPoints, points_of
from tests.forget.givens import request
from tests.forget.reference import resolve_events
from tests.pipelines.helpers import at, builder, logged, year

SUBJECTS = ("ana", "bob", "cy")
RELATIONS = ("lives_in", "works_at")
CITIES = ("Lisbon", "Porto", "Braga", "Faro")
COORDINATES = 40
"""As-of coordinates compared per check (a seeded sample of every valid time x known)."""


def history(seed: int, n: int) -> list[LoggedEvent]:
    """``n`` fact events of two tenants on two partitions: values that supersede each other,
    corrections, late facts (valid from before what is known), retractions."""
    rng = random.Random(seed)
    out: list[LoggedEvent] = []
    for i in range(n):
        tenant = "acme" if i % 5 else "other"
        b = builder(tenant)
        subject, relation = rng.choice(SUBJECTS), rng.choice(RELATIONS)
        valid = year(2020 + rng.randrange(5)) + timedelta(days=rng.randrange(300))
        event = (b.retract("s1", subject, relation, rng.choice((None, *CITIES)),
                           valid_from=valid, occurred_at=at(i))
                 if rng.random() < 0.15 else
                 b.fact("s1", subject, relation, rng.choice(CITIES), valid_from=valid,
                        occurred_at=at(i)))
        out.append(logged(event, i, partition=i % 2))
    return out


def _offsets(events: list[LoggedEvent]) -> dict[int, int]:
    out: dict[int, int] = {}
    for e in events:
        out[e.position.partition] = max(out.get(e.position.partition, 0), e.position.offset + 1)
    return out


@pytest.fixture
def index(tmp_path: Path) -> Iterator[DuckDBEventIndex]:
    opened = DuckDBEventIndex(tmp_path / "memstack.duckdb")
    yield opened
    opened.close()


def _general(index: DuckDBEventIndex, tenant: str, subject: str, relation: str | None,
             valid: datetime, known: datetime | LogCut) -> list[FactVersion]:
    return index.facts_as_of(tenant, subject=subject, relation=relation, valid=valid,
                             known=known)


def _coordinates(events: list[LoggedEvent]) -> list[tuple[datetime, datetime | LogCut]]:
    """Valid times around every event's, known times around every log time, cuts at every
    prefix of each partition (and partitions not consumed), and now."""
    valids = sorted({year(2019), year(2026)} | {
        t for e in events for t in (e.event.valid_from or year(2019),
                                    (e.event.valid_from or year(2019)) + timedelta(days=1))})
    knowns: list[datetime | LogCut] = [datetime.now(at(0).tzinfo)]
    for e in events[::5]:
        t = e.position.log_time
        knowns += [t, t - timedelta(microseconds=1)]
    ends = _offsets(events)
    for k in range(0, max(ends.values(), default=0) + 1, 5):
        knowns += [LogCut.of({0: k, 1: ends.get(1, 0)}), LogCut.of({0: ends.get(0, 0), 1: k})]
    knowns.append(LogCut.of({0: ends.get(0, 0)}))  # partition 1 not consumed
    every = [(v, k) for v in valids for k in knowns]
    return random.Random(len(events)).sample(every, min(COORDINATES, len(every)))


def _same(index: DuckDBEventIndex, points: FactPoints, events: list[LoggedEvent], *,
          source: DuckDBEventIndex | None = None) -> int:
    """Compare the index with the general plan on ``index`` at every coordinate (every other
    one with a relation); the number of answers compared. ``source``: the file the key index
    loads from, when it is not ``index`` (a reader's snapshot, judged by the writer's file)."""
    source = index if source is None else source
    compared = 0
    for tenant, subject in (("acme", "ana"), ("acme", "bob"), ("acme", "cy"),
                            ("other", "ana"), ("acme", "nobody")):
        for n, (valid, known) in enumerate(_coordinates(events)):
            relation = "lives_in" if n % 2 else None
            expected = _general(index, tenant, subject, relation, valid, known)
            got = points.facts(source, tenant, subject, relation, valid, known)
            assert got == expected, (tenant, subject, relation, valid, known)
            compared += 1
    return compared


def _apply(index: DuckDBEventIndex, operator: MemoryOperator,
           events: list[LoggedEvent]) -> None:
    index.apply(operator.apply_batch(events), _offsets(events), topic="t")


def test_the_index_answers_what_the_general_plan_answers_while_batches_commit(
        index: DuckDBEventIndex) -> None:
    events = history(seed=7, n=48)
    operator = MemoryOperator()
    points = points_of(index)
    for start in range(0, len(events), 12):  # held subjects follow each batch in place
        _apply(index, operator, events[start:start + 12])
        assert _same(index, points, events[:start + 12]) > 0
    fresh = FactPoints()  # and a cold index, loaded from the tables, agrees with both
    assert _same(index, fresh, events) > 0


def test_a_forgotten_fact_never_comes_out_of_the_index(index: DuckDBEventIndex) -> None:
    events = history(seed=11, n=40)
    _apply(index, MemoryOperator(), events)
    points = points_of(index)
    _same(index, points, events)  # every subject held, with its entries
    gone = next(e for e in events if e.event.subject == "ana" and e.event.tenant == "acme")
    forgotten = [e for e in events if e.event.tenant == "acme" and e.event.subject == "ana"]
    targets = resolve_events(request({"type": "subject", "subject": "ana"}), events)
    assert gone.event.event_id in targets.event_ids
    DuckDBForgetStore.over(index).erase(targets)

    ids = {e.event.event_id for e in forgotten}
    kept = [e for e in events if e.event.event_id not in ids]
    assert _same(index, points, kept) > 0
    now = datetime.now(at(0).tzinfo)
    for valid, known in [(year(2022), now), *_coordinates(events)]:
        answer = points.facts(index, "acme", "ana", None, valid, known)
        assert answer == []
        assert not {v.source_event_id for v in answer} & ids
    assert points.held("acme", "ana") is not None  # reloaded from the erased tables
    assert all(h.version.source_event_id not in ids
               for h in points.held("acme", "ana").versions)  # type: ignore[union-attr]


def test_a_fact_forgotten_by_event_recuts_the_others_exactly(index: DuckDBEventIndex) -> None:
    events = history(seed=3, n=40)
    operator = MemoryOperator()
    _apply(index, operator, events[:30])
    points = points_of(index)
    _same(index, points, events[:30])
    one = next(e for e in events[:30] if e.event.tenant == "acme"
               and e.event.subject == "bob")
    targets = resolve_events(
        request({"type": "event", "event_id": one.event.event_id}), events[:30])
    DuckDBForgetStore.over(index).erase(targets)
    kept = [e for e in events[:30] if e is not one]
    assert _same(index, points, kept) > 0
    # later batches after the forget, from an operator that reloads its keys from the stores
    again = MemoryOperator(loader=lambda key: index.fact_entries([key])[key])
    _apply(index, again, events[30:])
    assert _same(index, points, kept + events[30:]) > 0
    for valid, known in _coordinates(kept):
        answer = points.facts(index, "acme", "bob", None, valid, known)
        assert one.event.event_id not in {v.source_event_id for v in answer}


def test_a_load_that_raced_a_commit_is_not_kept(index: DuckDBEventIndex,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    events = history(seed=5, n=24)
    operator = MemoryOperator()
    _apply(index, operator, events[:12])
    points = points_of(index)
    read = duckdb_asof.subject_versions

    def read_then_commit(query: duckdb_asof.Query, tenant: str,
                         subject: str) -> list[FactVersion]:
        rows = read(query, tenant, subject)  # the snapshot before the batch below
        monkeypatch.setattr(duckdb_asof, "subject_versions", read)
        _apply(index, operator, events[12:])  # committed (and told) before the load installs
        return rows

    monkeypatch.setattr(duckdb_asof, "subject_versions", read_then_commit)
    subject = next(e.event.subject for e in events[12:] if e.event.tenant == "acme")
    assert subject is not None
    now = datetime.now(at(0).tzinfo)
    points.facts(index, "acme", subject, None, now, now)  # answers its own snapshot
    assert points.held("acme", subject) is None  # but does not keep it
    assert _same(index, points, events) > 0


def test_other_writes_drop_everything_held(index: DuckDBEventIndex) -> None:
    events = history(seed=9, n=16)
    _apply(index, MemoryOperator(), events)
    points = points_of(index)
    now = datetime.now(at(0).tzinfo)
    points.facts(index, "acme", "ana", None, now, now)
    assert points.held("acme", "ana") is not None
    with index.exclusive("checkpoint"):
        pass
    assert points.held("acme", "ana") is None


def test_a_delete_by_id_reaches_the_held_subject_that_owns_the_id(
        index: DuckDBEventIndex) -> None:
    """A committed delete names a version by id only: the owner map (kept as subjects are
    loaded and changed) finds its subject, and only that subject changes."""
    events = history(seed=5, n=40)
    _apply(index, MemoryOperator(), events)
    points = FactPoints()
    _same(index, points, events)  # every subject held
    ana, bob = points.held("acme", "ana"), points.held("acme", "bob")
    assert ana is not None and bob is not None and ana.versions
    gone = ana.versions[0].version.version_id
    points.changed([DeleteFactVersion(gone)])
    after = points.held("acme", "ana")
    assert after is not None
    assert gone not in {h.version.version_id for h in after.versions}
    assert len(after.versions) == len(ana.versions) - 1
    assert points.held("acme", "bob") is bob  # untouched: the same snapshot
    points.changed([DeleteFactVersion("no-such-version")])  # unknown: nothing held changes
    assert points.held("acme", "ana") is after and points.held("acme", "bob") is bob
