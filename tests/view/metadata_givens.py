"""The metadata scenario of the filter tests: twelve notes of tenant ``acme`` about trips, one
a day in January 2025 (log time), each with metadata; tenant ``other`` writes the same notes
(never returned to ``acme``). :data:`KNOWN_MID` is a past known time between the writes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.operators.log import LogPosition
from memstack.schemas.events import Event
from memstack.schemas.filters import matches, parse_filter

CITIES = ["Lisbon", "Porto", "Braga", "Faro"]
TAGS = [["beach"], ["museum", "food"], [], ["beach", "food", 3]]
DAYS = 12
KNOWN_MID = datetime(2025, 1, 6, 12, tzinfo=UTC)
"""A past known time: the first six notes (days 1-6) were known then, the others not."""


def _meta(i: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"city": CITIES[i % 4], "stars": i % 5, "tags": TAGS[i % 4]}
    if i % 3 == 0:
        meta["lang"] = "pt" if i % 2 else "en"
    if i == 7:
        meta["stars"] = 2.5
    return meta


def scenario() -> list[tuple[Event, LogPosition]]:
    placed: list[tuple[Event, LogPosition]] = []
    for tenant, partition in (("acme", 0), ("other", 1)):
        events = EventBuilder(Defaults(tenant=tenant, agent="helper", source="test"))
        for i in range(DAYS):
            known = datetime(2025, 1, 1 + i, tzinfo=UTC)
            note = events.note(f"trip{i % 2}", f"Our trip to {CITIES[i % 4]}, day {i}: we walked "
                               "and ate well", occurred_at=datetime(2024, 6, 1 + i, tzinfo=UTC),
                               metadata=_meta(i))
            placed.append((note, LogPosition(known, partition, i)))
    return placed


METADATA = {i: _meta(i) for i in range(DAYS)}


def day(text: str) -> int:
    return int(text.split("day ")[1].split(":")[0])


def expected(spec: dict[str, Any], known_days: range) -> set[int]:
    f = parse_filter(spec)
    return {i for i in known_days if matches(f, METADATA[i])}


