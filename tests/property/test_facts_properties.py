"""Invariants of the bitemporal fact operator, for any sequence of fact events on a few keys.

- versions of one timeline never overlap in valid time at any transaction time;
- every as-of answer equals a point-by-point oracle of the rule in docs/semantics.md;
- applying the same events twice changes nothing;
- the result does not depend on batching or delivery order;
- forget(x) equals never having seen x; seeding a key from its entries equals building it.
"""

from __future__ import annotations

import itertools
from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from memstack.operators.facts import KeyState
from memstack.operators.log import LoggedEvent
from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import FactVersion
from memstack.operators.relations import RelationRegistry
from memstack.operators.timeline import FactKey
from memstack.schemas.events import FactAssertedPayload, FactRetractedPayload
from tests.operators.givens import Store, as_of, at, build, fact, retraction, year

REGISTRY = RelationRegistry(frozenset({"likes"}))
SUBJECTS, RELATIONS, OBJECTS = ("ann", "ben"), ("lives_in", "likes"), ("x", "y", "z")
SETTINGS = settings(max_examples=200, deadline=None)


@st.composite
def fact_events(
    draw: st.DrawFn, max_size: int = 10, subjects: tuple[str, ...] = SUBJECTS
) -> list[LoggedEvent]:
    """Fact events at distinct log positions 1..n on partitions 0..2, in log order."""
    n = draw(st.integers(min_value=1, max_value=max_size))
    out = []
    for tt in range(1, n + 1):
        subject, relation = draw(st.sampled_from(subjects)), draw(st.sampled_from(RELATIONS))
        start = draw(st.one_of(st.none(), st.integers(2000, 2006)))
        span = draw(st.one_of(st.none(), st.integers(1, 3)))
        valid_from = None if start is None else year(start)
        valid_to = None if start is None or span is None else year(start + span)
        partition = draw(st.integers(0, 2))
        if draw(st.booleans()):
            obj = draw(st.sampled_from(OBJECTS))
            out.append(fact(subject, relation, obj, tt=tt, valid_from=valid_from,
                            valid_to=valid_to, partition=partition))
        else:
            maybe = draw(st.one_of(st.none(), st.sampled_from(OBJECTS)))
            out.append(retraction(subject, relation, maybe, tt=tt, valid_from=valid_from,
                                  valid_to=valid_to, partition=partition))
    return out


def _store(events: list[LoggedEvent]) -> Store:
    return build(events, REGISTRY)


def _timeline_of(v: FactVersion) -> tuple[str, str, str | None]:
    return (v.subject, v.relation, v.object if REGISTRY.is_multi(v.relation) else None)


@given(fact_events())
@SETTINGS
def test_versions_of_one_timeline_never_overlap_at_any_transaction_time(
    events: list[LoggedEvent],
) -> None:
    store = _store(events)
    for e in events:
        known = [v for v in store.versions.values()
                 if v.tt_from_pos <= e.position and (v.tt_to_pos is None
                                                     or e.position < v.tt_to_pos)]
        by_timeline: dict[tuple[str, str, str | None], list[FactVersion]] = {}
        for v in known:
            by_timeline.setdefault(_timeline_of(v), []).append(v)
        for versions in by_timeline.values():
            spans = sorted((v.vt_from, v.vt_to or datetime.max.replace(tzinfo=v.vt_from.tzinfo))
                           for v in versions)
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans


def _object(e: LoggedEvent) -> str | None:
    payload = e.event.payload
    assert isinstance(payload, FactAssertedPayload | FactRetractedPayload)
    return payload.object


def _relation(e: LoggedEvent) -> str:
    payload = e.event.payload
    assert isinstance(payload, FactAssertedPayload | FactRetractedPayload)
    return payload.relation


def _oracle(events: list[LoggedEvent], subject: str, relation: str, vt: datetime,
            upto: int) -> set[str]:
    """The rule, point by point: replay entries known at ``upto`` and track the value at ``vt``."""
    multi = REGISTRY.is_multi(relation)
    applied: list[LoggedEvent] = []
    present: set[str] = set()
    for e in sorted(events, key=lambda e: e.position):
        ev = e.event
        if e.position.offset > upto or (ev.subject, _relation(e)) != (subject, relation):
            continue
        obj = _object(e)
        lines = [None] if not multi else [obj] if obj is not None else sorted(present)
        for line in lines:
            same = [p for p in applied if not multi or _object(p) in (None, line)]
            later = [p.event.valid_start for p in same if p.event.valid_start > ev.valid_start]
            end = ev.valid_to or min(later, default=None)
            if not (ev.valid_start <= vt and (end is None or vt < end)):
                continue
            if ev.kind == "fact_asserted" and obj is not None:
                present = (present | {obj}) if multi else {obj}
            elif multi and line is not None:
                present.discard(line)
            elif obj is None or obj in present:
                present = set()
        applied.append(e)
    return present


@given(fact_events(subjects=SUBJECTS[:1]))  # one subject: more interaction per key
@SETTINGS
def test_every_as_of_answer_matches_the_point_oracle(events: list[LoggedEvent]) -> None:
    store = _store(events)
    points = [year(y) for y in range(1999, 2010)] + [at(k) for k in range(len(events) + 1)]
    for subject in SUBJECTS:
        for relation in RELATIONS:
            versions = store.facts(subject, relation)
            for upto in range(len(events) + 1):
                for vt in points:
                    expected = _oracle(events, subject, relation, vt, upto)
                    assert as_of(versions, vt, upto) == expected, (subject, relation, vt, upto)


@given(fact_events())
@SETTINGS
def test_applying_the_same_events_twice_changes_nothing(events: list[LoggedEvent]) -> None:
    op = MemoryOperator(REGISTRY)
    store = Store().apply(op.apply_batch(events))
    before = Store(**{k: dict(v) for k, v in vars(store).items()})

    again = [m for e in events for m in op.apply(e)]

    assert again == []
    assert store.apply(again) == before


@given(st.data())
@SETTINGS
def test_the_result_does_not_depend_on_batching_or_delivery_order(data: st.DataObject) -> None:
    events = data.draw(fact_events())
    shuffled = data.draw(st.permutations(events))
    cuts = sorted(data.draw(st.sets(st.integers(0, len(events)), max_size=3)))
    op, store = MemoryOperator(REGISTRY), Store()
    for lo, hi in zip([0, *cuts], [*cuts, len(events)], strict=True):
        store.apply(op.apply_batch(shuffled[lo:hi]))

    assert store == _store(events)
    assert store == _store(shuffled)
    for state in op.snapshot().states:  # the rebuild relies on closed versions sorted by tt_to
        ends = [v.tt_to_pos for v in state.closed]
        assert ends == sorted(ends)  # type: ignore[type-var]


@given(st.data())
@SETTINGS
def test_forget_equals_never_having_seen(data: st.DataObject) -> None:
    events = data.draw(fact_events())
    gone = data.draw(st.sets(st.sampled_from(events), min_size=1), label="forgotten")
    op = MemoryOperator(REGISTRY)
    store = Store().apply(op.apply_batch(events))

    store.apply(op.forget(e.event.event_id for e in gone))

    kept = [e for e in events if e not in gone]
    assert store == _store(kept)
    ids = {e.event.event_id for e in gone}
    assert not any({v.source_event_id, v.closed_by_event_id} & ids
                   for v in store.versions.values())


@given(fact_events())
@SETTINGS
def test_seeding_a_key_from_its_entries_equals_building_it(events: list[LoggedEvent]) -> None:
    op = MemoryOperator(REGISTRY)
    store = Store().apply(op.apply_batch(events))
    for state in op.snapshot().states:
        seeded = KeyState.from_entries(state.key, reversed(state.entries),
                                       multi=REGISTRY.is_multi(state.key.relation))
        assert set(seeded.versions) == set(state.versions)
        key: FactKey = state.key
        assert set(seeded.versions) == set(store.facts(key.subject, key.relation))
