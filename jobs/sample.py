"""A small sample conversation used by the demo and the docs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstack.foundation.builders import EventBuilder
from memstack.schemas.events import Event

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def sample_conversation(builder: EventBuilder, session: str) -> list[Event]:
    """Ten events of an assistant helping a user plan a move, with facts that change."""

    def at(minutes: int) -> datetime:
        return T0 + timedelta(minutes=minutes)

    ana = "user:ana"
    return [
        builder.message(session, "user", "Hi, I'm Ana. I live in Lisbon and work as a nurse.",
                        occurred_at=at(0), subject=ana, authority="user"),
        builder.fact(session, ana, "lives_in", "Lisbon",
                     valid_from=datetime(2019, 5, 1, tzinfo=UTC), occurred_at=at(0)),
        builder.fact(session, ana, "works_as", "nurse", occurred_at=at(0)),
        builder.message(session, "assistant", "Nice to meet you, Ana! How can I help today?",
                        occurred_at=at(1)),
        builder.message(session, "user", "I'm moving to Porto on the first of April. "
                        "Can you find me a flat near the Bolhão market?", occurred_at=at(2),
                        subject=ana, authority="user"),
        builder.tool_call(session, "flat_search", "call-1",
                          {"city": "Porto", "near": "Bolhão market", "max_rent_eur": 1100},
                          occurred_at=at(3)),
        builder.tool_result(session, "flat_search", "call-1",
                            "3 flats found: Rua Formosa 12 (950 EUR), Rua de Sá da Bandeira 40 "
                            "(1050 EUR), Rua do Bonjardim 7 (1100 EUR)", occurred_at=at(4)),
        builder.fact(session, ana, "lives_in", "Porto",
                     valid_from=datetime(2026, 4, 1, tzinfo=UTC), occurred_at=at(5)),
        builder.observation(session, "Ana prefers quiet streets and has a cat.",
                            occurred_at=at(6), subject=ana),
        builder.note(session, "Follow up on the Rua Formosa flat viewing next week.",
                     occurred_at=at(7), subject=ana),
    ]
