"""The hybrid ranking on real stores: the query's focus and the neighbours' shares.

A two-person chat (every turn starts with its speaker's name) where the answer to a question is
the turn after the one that matches its words, next to a second session of the same tenant and
a session of another tenant at the same times, and one turn that memory learned late.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.operators.log import LogPosition
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event
from memstack.view import MemoryView
from memstack.view.resident.registry import ENV as RESIDENT_ENV
from memstack.view.search import FUSED_ONLY, focused
from tests.view.givens import project

T0 = datetime(2024, 6, 1, 9, 0, tzinfo=UTC)
LATE = datetime(2025, 1, 1, tzinfo=UTC)
TOPICS = ["gardening", "chess", "violin", "astronomy", "pottery", "baking", "cycling", "poetry",
          "sailing", "origami", "jazz", "hiking", "knitting", "photography", "climbing",
          "birdwatching", "calligraphy", "surfing", "robotics", "archery"]
ASKED, ANSWER, LATER = 80, 81, 82


def _chat() -> list[tuple[Event, LogPosition]]:
    chat = EventBuilder(Defaults(tenant="chat", agent="helper", source="test"))
    other = EventBuilder(Defaults(tenant="other", agent="helper", source="test"))
    placed: list[tuple[Event, LogPosition]] = []

    def put(event: Event, known: datetime) -> None:
        placed.append((event, LogPosition(known, 0, len(placed))))

    for i in range(160):
        at = T0 + timedelta(seconds=30 * i)
        speaker, to = ("Ana", "Ben") if i % 2 else ("Ben", "Ana")
        text = {ASKED: "Ben: How was your weekend with the kids, Ana?",
                ANSWER: "Ana: We went camping by the lake and grilled fish, it was great.",
                LATER: "Ben: Sounds lovely! Did the kids catch anything?"}.get(
            i, f"{speaker}: {to}, I keep thinking about {TOPICS[i % 20]} and "
               f"{TOPICS[(i * 7) % 20]} lately.")
        put(chat.message("c1", "user" if speaker == "Ana" else "assistant", text,
                         occurred_at=at), LATE if i == LATER else at + timedelta(seconds=1))
    near = T0 + timedelta(seconds=30 * ANSWER + 5)
    put(chat.message("c2", "user", "Ana: the weekend with the kids was camping too",
                     occurred_at=near), near)
    put(other.message("c1", "user", "Ana: we went camping with the kids by the lake",
                      occurred_at=near), near)
    return placed


PLACED = _chat()


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory, encoder: MiniLMEncoder) -> MemoryView:
    directory: Path = tmp_path_factory.mktemp("ranking") / "stores"
    project(directory, PLACED, encoder)
    stores = Stores.open(directory, read_only=True)
    return MemoryView("chat", stores, encoder=encoder)


def _ids(placed: list[tuple[Event, LogPosition]]) -> dict[str, str]:
    return {e.payload.text: e.event_id for e, _ in placed  # type: ignore[union-attr]
            if e.tenant == "chat" and e.session == "c1"}


def test_the_speakers_names_leave_the_query_the_legs_see(chat: MemoryView) -> None:
    scope = ["session = 'c1'"]
    assert focused(chat.as_of(), "What did Ana do with her kids?", scope, 0.2) == \
        "What did do with her kids?"
    assert focused(chat.as_of(), "What did Ana do?", scope, None) == "What did Ana do?"


@pytest.mark.parametrize("resident", ["1", "0"], ids=["resident", "lancedb"])
def test_the_answer_after_the_matching_turn_ranks_with_its_neighbours_share(
        chat: MemoryView, resident: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RESIDENT_ENV, resident)
    texts = _ids(PLACED)
    hits = chat.search("What did Ana do with the kids on the weekend?", 3, session="c1")
    by_id = {h.event_id: h for h in hits}
    answer = texts["Ana: We went camping by the lake and grilled fish, it was great."]
    assert answer in by_id
    assert by_id[answer].score.neighbours > 0
    plain = chat.search("What did Ana do with the kids on the weekend?", 3, session="c1",
                        ranking=FUSED_ONLY)
    assert all(h.score.neighbours == 0 for h in plain)
    if resident == "0":  # LanceDB's BM25 (table-wide statistics) ranks it with neither leg
        assert answer not in {h.event_id for h in plain}


def test_neighbours_stay_in_the_session_the_tenant_and_the_as_of(chat: MemoryView) -> None:
    texts = _ids(PLACED)
    later = texts["Ben: Sounds lovely! Did the kids catch anything?"]
    query = "camping with the kids at the lake"
    now = chat.as_of().search(query, 10, session="c1")
    assert {h.memory.session for h in now} == {"c1"}
    assert {h.memory.tenant for h in now} == {"chat"}
    assert later in {h.event_id for h in now}
    before = chat.as_of(known=LATE - timedelta(days=1)).search(query, 10, session="c1")
    assert later not in {h.event_id for h in before}
    everywhere = chat.as_of(known=LATE - timedelta(days=1)).search(query, 20)
    assert later not in {h.event_id for h in everywhere}
    assert {h.memory.tenant for h in everywhere} == {"chat"}


def test_the_final_read_takes_only_rows_the_neighbour_stage_did_not_read(
        chat: MemoryView, monkeypatch: pytest.MonkeyPatch) -> None:
    """The neighbour stage reads the best candidates' full rows; the final read asks the store
    for the other hits only (one LanceDB read less when the top k are those candidates). The
    search through LanceDB (the resident index holds the rows: no read at all)."""
    monkeypatch.setenv(RESIDENT_ENV, "0")
    vectors = chat.stores.vectors
    real = vectors.rows_at
    asked: list[list[str]] = []

    def rows_at(row_ids: list[int], memory_ids: list[str]) -> object:
        asked.append(list(memory_ids))
        return real(row_ids, memory_ids)

    monkeypatch.setattr(vectors, "rows_at", rows_at)
    texts = _ids(PLACED)
    hits = chat.search("What did Ana do with the kids on the weekend?", 3, session="c1")
    answer = texts["Ana: We went camping by the lake and grilled fish, it was great."]
    assert answer in {h.event_id for h in hits} and all(h.memory.text for h in hits)
    best, *final = asked
    rest = [h.memory.memory_id for h in hits if h.memory.memory_id not in best]
    assert final == ([rest] if rest else [])  # never a row read twice, no empty read
    assert len(hits) == 3 and len(best) == 3
