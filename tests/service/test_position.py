"""Position tokens: round trip, merge, cover and lag (pure logic)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstack.foundation.log_coordinates import InvalidPositionError, Position

offsets = st.dictionaries(st.integers(0, 63), st.integers(0, 10**12), max_size=6)


@given(offsets, offsets)
def test_token_round_trips(events: dict[int, int], forgets: dict[int, int]) -> None:
    position = Position(events, forgets)
    assert Position.parse(position.token) == position
    assert all(c.isalnum() or c in "-." for c in position.token)  # URL-safe as is


@given(offsets, offsets, offsets)
def test_merge_covers_both(a: dict[int, int], b: dict[int, int], f: dict[int, int]) -> None:
    merged = Position(a, f).merge(Position(b))
    assert merged.covers(Position(a, f)) and merged.covers(Position(b))
    assert Position.parse(f"{Position(a).token}.{Position(b).token}") == Position(a).merge(
        Position(b))


def test_covers_and_behind() -> None:
    applied = Position({0: 10, 1: 4}, {0: 2})
    assert applied.covers(Position.parse("e0-10.e1-3.f0-2"))
    assert applied.covers(Position.parse(""))
    wanted = Position.parse("e0-12.e2-1.f0-3")
    assert not applied.covers(wanted)
    assert applied.behind(wanted) == {"e0": 2, "e2": 1, "f0": 1}


@pytest.mark.parametrize("token", ["x0-1", "e0", "e-1-2", "e0-1;e1-2", "0:12"])
def test_malformed_tokens_say_what_a_token_is(token: str) -> None:
    with pytest.raises(InvalidPositionError, match="'e<partition>-<offset>'"):
        Position.parse(token)
