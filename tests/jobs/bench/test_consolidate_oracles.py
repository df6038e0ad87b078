"""The consolidation benchmark's fact generator and its capacity read-out."""

from __future__ import annotations

from memstack.jobs.bench.consolidate import _items_at_90
from memstack.jobs.bench.consolidate.data import RELATIONS, _texts


def test_facts_are_a_fixed_shuffle_whose_smaller_runs_are_prefixes() -> None:
    small, large = _texts(100, 10), _texts(400, 20)
    assert small[0] == large[0][:100] and small[1] == large[1][:100]
    assert small[2] == large[2][:10]
    cues, objects, para, reference = large
    assert len({(c.subject, c.relation) for c in cues}) == 400  # no fact twice
    for cue, obj in zip(cues, objects, strict=True):
        assert obj in RELATIONS[cue.relation][0].split()
    for cue, text in zip(cues[:20], para, strict=True):
        assert cue.subject in text
    assert not {f"{c.subject} {c.relation}" for c in cues} & set(reference)  # unused cues


def test_items_at_90_interpolates_between_loads() -> None:
    assert abs(_items_at_90([100, 200, 400], [1.0, 0.95, 0.85]) - 300.0) < 1e-9
    assert _items_at_90([100, 200], [1.0, 0.99]) == 200.0
    assert _items_at_90([100, 200], [0.5, 0.4]) == 0.0
