"""The hostile-input generator of ``memstack eval faults``: every mutation appears, the
surely-bad ones are all refused by the event parser (and never crash it), the generator is
deterministic by seed, and its HTTP requests cover every route family."""

from __future__ import annotations

import json
import random
from collections import Counter

from memstack.jobs.eval.faults.fuzz import (
    HUGE,
    MAYBE,
    MUTATIONS,
    SURE,
    base_event,
    hostile_events,
    hostile_requests,
    is_valid,
)


def test_every_mutation_is_drawn_and_surely_bad_ones_are_invalid() -> None:
    inputs = list(hostile_events(random.Random(7), 1500, "t0"))
    counts = Counter(h.mutation for h in inputs)
    assert set(counts) == set(SURE) | set(MAYBE) == set(MUTATIONS)
    assert min(counts.values()) >= 50
    for hostile in inputs:
        assert hostile.surely_bad == (hostile.mutation in SURE)
        if hostile.surely_bad:  # is_valid raising anything but InvalidEventError fails here
            assert not hostile.expected_valid, (hostile.mutation, hostile.data[:200])


def test_base_events_are_valid_and_hostile_names_stay_legal() -> None:
    rng = random.Random(3)
    assert all(is_valid(json.dumps(base_event(rng, "t0", "s")).encode()) for _ in range(50))
    hostile = [h for h in hostile_events(rng, 600, "t0") if h.mutation == "hostile_name"]
    assert hostile and all(h.expected_valid for h in hostile)  # legal: must be stored as is


def test_shapes_of_the_nastiest_mutations() -> None:
    rng = random.Random(11)
    by_kind: dict[str, list[bytes]] = {}
    for h in hostile_events(rng, 2000, "t0"):
        by_kind.setdefault(h.mutation, []).append(h.data)
    assert any(d.count(b'{"a": [') >= 200 for d in by_kind["deep_nesting"])
    assert any(len(d) > HUGE for d in by_kind["huge_string"])
    assert all(_not_utf8(d) for d in by_kind["invalid_utf8"])
    assert any(b'"2026-11-30T12:00:00"' in d for d in by_kind["naive_time"])


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_deterministic_by_seed() -> None:
    """The same seed gives the same mutations of the same sizes (event ids are fresh uuid7s,
    the only part that differs)."""
    a = list(hostile_events(random.Random(5), 300, "t0"))
    b = list(hostile_events(random.Random(5), 300, "t0"))
    c = list(hostile_events(random.Random(6), 300, "t0"))
    assert [(h.mutation, len(h.data)) for h in a] == [(h.mutation, len(h.data)) for h in b]
    assert [(h.mutation, len(h.data)) for h in a] != [(h.mutation, len(h.data)) for h in c]


def test_requests_cover_bodies_forgets_and_params() -> None:
    requests = list(hostile_requests(random.Random(2), 500, "t0", "t1"))
    kinds = Counter(r.mutation.split("-")[0] for r in requests)
    assert {"tenant_mismatch", "bad_forget", "bad_params"} <= set(kinds)
    assert {r.path for r in requests} >= {"events", "forget", "records", "search"}
    for request in requests:
        if request.mutation == "tenant_mismatch":
            event = json.loads(request.body or b"")["events"][0]
            assert event["tenant"] == "t1" and is_valid(json.dumps(event).encode())
