"""The log of ``memstack bench scale`` and of the sharding tests: several tenants, sessions
spread over the partitions, and facts whose keys straddle partitions.

Events are keyed ``tenant/session``, so a session's events share a partition; the facts about
one person are asserted from several sessions (each fact key's entries land on several
partitions), with valid times out of log order and retractions, which is what makes a shard-
local fact index wrong and the router's merge necessary (docs/scaling.md). Every text is
distinct and the log is a function of the arguments (seeded).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.schemas.events import Event

PEOPLE = ("ana", "ben", "chloe", "dmitri")
CITIES = ("Lisbon", "Porto", "Madrid", "Berlin", "Oslo", "Rome", "Vienna", "Prague")
TOPICS = ("tomato seedlings", "the basil pots", "a flat search", "the train timetable",
          "violin lessons", "a tax form", "the bike repair", "sourdough starter",
          "a hiking route", "the quarterly report")
RELATIONS = ("lives_in", "works_in")
EPOCH = datetime(2020, 1, 1, tzinfo=UTC)


def tenant_name(index: int) -> str:
    return f"tenant{index}"


def scale_log(tenants: int, sessions: int, turns: int, seed: int = 7) -> list[Event]:
    """``tenants * sessions * turns`` messages, plus a fact every third turn and a retraction
    every seventh, sessions interleaved in log order."""
    rng = random.Random(seed)
    streams: list[list[Event]] = []
    for t in range(tenants):
        builder = EventBuilder(Defaults(tenant_name(t), "scale-bench"))
        for s in range(sessions):
            streams.append(_session(builder, f"s{s}", f"log {seed}, session {s}", turns, rng))
    out: list[Event] = []
    for i in range(max(len(s) for s in streams)):
        out += [s[i] for s in streams if i < len(s)]
    return out


def _session(builder: EventBuilder, session: str, where: str, turns: int,
             rng: random.Random) -> list[Event]:
    events: list[Event] = []
    for turn in range(turns):
        person = rng.choice(PEOPLE)
        text = (f"{person} talked about {rng.choice(TOPICS)} near {rng.choice(CITIES)} "
                f"({where}, turn {turn})")
        events.append(builder.message(session, rng.choice(("user", "assistant")), text,
                                      subject=f"user:{person}"))
        if turn % 3 == 2:
            valid = EPOCH + timedelta(days=rng.randrange(0, 2000))
            events.append(builder.fact(session, f"user:{person}", rng.choice(RELATIONS),
                                       rng.choice(CITIES), valid_from=valid))
        if turn % 7 == 6:
            valid = EPOCH + timedelta(days=rng.randrange(1000, 2200))
            events.append(builder.retract(session, f"user:{rng.choice(PEOPLE)}",
                                          rng.choice(RELATIONS), valid_from=valid))
    return events
