"""Generated agent workloads for the benchmarks: realistic mixes of every event kind.

:func:`conversation` is one session of ten events shaped like the sample conversation
(messages, facts with supersession, a tool call and its result, an observation, a note), every
text different from every other session's, so no cache anywhere can skip the model.
:func:`mix` strings conversations together and adds a forget request now and then.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstack.foundation.builders import EventBuilder
from memstack.schemas.events import Event, EventKind

NAMES = ("Ana", "Bruno", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun")
CITIES = ("Lisbon", "Porto", "Braga", "Faro", "Coimbra", "Aveiro", "Evora", "Leiria")
JOBS = ("nurse", "teacher", "welder", "chef", "pilot", "architect", "baker", "lawyer")
STREETS = ("Rua Formosa", "Rua do Bonjardim", "Rua de Santa Catarina", "Avenida da Liberdade")


def conversation(builder: EventBuilder, i: int) -> list[Event]:
    """Ten events shaped like the sample conversation, every text different from every other
    session's (so no cache anywhere, not even the live worker's, can skip the model)."""
    t0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC) + timedelta(minutes=i)
    name, job = NAMES[i % len(NAMES)], JOBS[(i // 3) % len(JOBS)]
    home, dest = CITIES[i % len(CITIES)], CITIES[(i + 3) % len(CITIES)]
    street, rent, subject, session = STREETS[i % len(STREETS)], 700 + i, f"user:{i}", f"s{i}"

    def at(minutes: int) -> datetime:
        return t0 + timedelta(minutes=minutes)

    return [
        builder.message(session, "user", f"Hi, I'm {name} (#{i}). I live in {home} and work "
                        f"as a {job}.", occurred_at=at(0), subject=subject, authority="user"),
        builder.fact(session, subject, "lives_in", home, occurred_at=at(0)),
        builder.fact(session, subject, "works_as", f"{job} {i}", occurred_at=at(0)),
        builder.message(session, "assistant", f"Nice to meet you, {name}! How can I help "
                        f"today with case {i}?", occurred_at=at(1)),
        builder.message(session, "user", f"I'm moving to {dest} on day {i % 28 + 1}. Find me a "
                        f"flat under {rent} EUR near {street}?", occurred_at=at(2),
                        subject=subject, authority="user"),
        builder.tool_call(session, "flat_search", f"call-{i}",
                          {"city": dest, "near": street, "max_rent_eur": rent},
                          occurred_at=at(3)),
        builder.tool_result(session, "flat_search", f"call-{i}",
                            f"{i % 5 + 1} flats found: {street} {i % 90 + 1} ({rent - 50} EUR), "
                            f"{STREETS[(i + 1) % len(STREETS)]} {i % 40 + 2} ({rent} EUR)",
                            occurred_at=at(4)),
        builder.fact(session, subject, "lives_in", dest, occurred_at=at(5)),
        builder.observation(session, f"{name} prefers quiet streets and has {i % 4} cats "
                            f"(noted in session {i}).", occurred_at=at(6), subject=subject),
        builder.note(session, f"Follow up on the {street} {i % 90 + 1} viewing on day "
                     f"{i % 28 + 2}.", occurred_at=at(7), subject=subject),
    ]




def mix(builder: EventBuilder, first: int, events: int, forget_every: int = 0) -> list[Event]:
    """``events`` events: conversations ``first, first + 1, ...`` (session ``s{i}``), and after
    every ``forget_every``-th of them (0: never) a forget request for the session
    ``forget_every // 2`` conversations back."""
    out: list[Event] = []
    i = first
    while len(out) < events:
        out += conversation(builder, i)
        i += 1
        if forget_every and (i - first) % forget_every == 0:
            gone = f"s{i - forget_every // 2}"
            out.append(builder.forget({"type": "session", "session": gone},
                                      reason="user asked"))
    return out[:events]


def texts_of(events: list[Event]) -> list[str]:
    """The texts the pipeline embeds for ``events`` (forget requests and others have none)."""
    return [t for e in events if e.kind is not EventKind.FORGET_REQUESTED
            and (t := e.text()) is not None]
