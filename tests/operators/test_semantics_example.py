"""The worked example of docs/semantics.md, read from the doc and checked against the operator."""

from __future__ import annotations

from pathlib import Path

from tests.operators.givens import Scenario, fact, retraction, year

DOC = Path(__file__).resolve().parents[2] / "docs" / "semantics.md"


def _versions_table() -> list[tuple[str, ...]]:
    """Rows of the doc's versions table (the one whose header starts with '| object')."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| object |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(tuple(cell.strip() for cell in line.strip("|").split("|")))
    return rows


def test_the_worked_example_table_is_what_the_operator_derives() -> None:
    events = [
        fact("alice", "lives_in", "Paris", tt=1, valid_from=year(2020)),
        fact("alice", "lives_in", "London", tt=2, valid_from=year(2018)),
        fact("alice", "lives_in", "London", tt=3, valid_from=year(2020), valid_to=year(2021)),
        retraction("alice", "lives_in", tt=4, valid_from=year(2024)),
    ]
    name = {e.event.event_id: f"e{i}" for i, e in enumerate(events, start=1)}
    s = Scenario().given(*events)

    derived = sorted(
        (v.object, str(v.vt_from.year), "∞" if v.vt_to is None else str(v.vt_to.year),
         f"tt{v.tt_from_offset}", "now" if v.tt_to_offset is None else f"tt{v.tt_to_offset}",
         name[v.source_event_id], name.get(v.closed_by_event_id or "", ""))
        for v in s.store.facts("alice", "lives_in")
    )
    assert derived == sorted(_versions_table())

    answers = {(y, tt): s.value("alice", "lives_in", vt=year(y), tt=tt)
               for y in (2019, 2020, 2025) for tt in (1, 2, 3, 4)}
    assert answers == {
        (2019, 1): set(), (2019, 2): {"London"}, (2019, 3): {"London"}, (2019, 4): {"London"},
        (2020, 1): {"Paris"}, (2020, 2): {"Paris"}, (2020, 3): {"London"}, (2020, 4): {"London"},
        (2025, 1): {"Paris"}, (2025, 2): {"Paris"}, (2025, 3): {"Paris"}, (2025, 4): set(),
    }
