"""The stale-fact evaluation's truth, generator and baseline reader, worked by hand."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from memstack.jobs.eval.stale import START, Move, city_in, latest_naming, plan, truth
from memstack.operators.log import LogPosition
from memstack.operators.mutations import MemoryRow
from memstack.view.types import ScoreParts, SearchHit

D = timedelta(days=1)


def _pos(minute: int) -> LogPosition:
    return LogPosition(datetime(2026, 1, 1, 0, minute, tzinfo=UTC), 0, minute)


def test_truth_uses_only_what_was_known_and_valid() -> None:
    moves = [Move("Ana", "Porto", START), Move("Ana", "Faro", START + 10 * D),
             Move("Ana", "Braga", START + 5 * D),  # learnt late: valid before Faro
             Move("Ana", "Evora", START + 10 * D, correction_of="Faro")]
    at = [_pos(1), _pos(2), _pos(3), _pos(4)]
    assert truth(moves, at, "Ana", START - D, _pos(4).log_time) is None
    assert truth(moves, at, "Ana", START + 7 * D, _pos(2).log_time) == "Porto"  # Braga unknown
    assert truth(moves, at, "Ana", START + 7 * D, _pos(3).log_time) == "Braga"
    assert truth(moves, at, "Ana", START + 20 * D, _pos(3).log_time) == "Faro"
    assert truth(moves, at, "Ana", START + 20 * D, _pos(4).log_time) == "Evora"  # corrected
    assert truth(moves, at, "Bruno", START + 20 * D, _pos(4).log_time) is None


def test_plan_has_late_facts_and_corrections_and_keeps_each_persons_order() -> None:
    moves = plan(random.Random(20240501), 40)
    people = {m.person for m in moves}
    assert len(people) == 40
    assert any(m.correction_of for m in moves)
    latest: dict[str, datetime] = {}
    late = 0
    for m in moves:
        late += m.correction_of is None and m.valid_from < latest.get(m.person, m.valid_from)
        latest[m.person] = max(latest.get(m.person, m.valid_from), m.valid_from)
    assert late > 0


def _hit(text: str, vt_day: int, offset: int) -> SearchHit:
    at = START + vt_day * D
    row = MemoryRow(f"m{offset}", f"m{offset}", "t", "s", None, "note", text, at, None,
                    at, None, 0, offset)
    return SearchHit(1, row, ScoreParts(0.0, None, None, None, None))


def test_latest_naming_reads_the_latest_note_about_the_person() -> None:
    hits = [_hit("Ana Silva moved to Porto.", 30, 1), _hit("Rui Costa moved to Oslo.", 90, 2),
            _hit("Ana Silva settled in Faro.", 60, 3),
            _hit("Correction: Ana Silva moved to Braga, not Faro.", 60, 4)]
    assert latest_naming(hits, "Ana Silva") == "Braga"  # same valid time, logged later
    assert latest_naming(hits, "Eva Lopes") is None
    assert city_in("Correction: X moved to Braga, not Faro.") == "Braga"
