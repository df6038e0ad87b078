"""Context assembly: as-of content, the token budget, provenance, and the source hook."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memstack.view import (
    AsOfView,
    ContextItem,
    ContextRequest,
    MemoryView,
    RecentTurns,
    default_sources,
    estimate_tokens,
)
from tests.view.givens import K, V


def test_token_estimate_is_four_characters_per_token_plus_the_line_break() -> None:
    assert estimate_tokens("") == 1
    assert estimate_tokens("abcd") == 2
    assert estimate_tokens("abcde") == 3


def test_context_is_as_of_and_carries_provenance(acme: MemoryView) -> None:
    early = acme.as_of(V(2, 15), K(2, 20)).context("Where does Ana live?", 400, session="s1")
    assert "ana lives_in Porto" in early.text and "Braga" not in early.text
    now = acme.as_of().context("Where does Ana live?", 400, session="s1")
    assert "ana lives_in Braga" in now.text
    assert now.used_tokens <= 400 and now.dropped >= 0
    assert {i.source for i in now.items} == {"facts", "relevant"}  # recent turns: all relevant
    assert all(i.event_id for i in now.items)
    ids = [i.event_id for i in now.items if i.source != "facts"]
    assert len(ids) == len(set(ids)) == 5       # no turn twice; Bob's message is relevant too
    headers = sum(estimate_tokens(f"## {t}") for t in ("Current facts", "Relevant memories"))
    assert now.used_tokens == sum(i.tokens for i in now.items) + headers


def test_recent_turns_are_the_latest_shown_oldest_first(acme: MemoryView) -> None:
    view = MemoryView("acme", acme.stores, encoder=acme.encoder,
                      context_sources=[RecentTurns(turns=3)])
    context = view.as_of(known=K(3, 20)).context("anything", 200, session="s1")
    assert [i.text for i in context.items] == [
        "[note] Ana lives in Lisbon, in a flat near the river", "[note] Ana moved to Porto",
        "[note] Correction: Ana moved to Braga, not Porto"]
    tight = view.context("anything", 20, session="s1")
    assert [i.text for i in tight.items] == ["[note] Ana had lived in Faro since mid-January"]


def test_a_tight_budget_keeps_what_fits(acme: MemoryView) -> None:
    wide = acme.context("Where does Ana live?", 2000, session="s1")
    tight = acme.context("Where does Ana live?", 40, session="s1")
    assert tight.used_tokens <= 40 < wide.used_tokens
    assert len(tight.items) < len(wide.items) and tight.dropped > wide.dropped
    assert acme.context("Where does Ana live?", 1).items == ()


@dataclass(frozen=True)
class SessionStateStub:
    """A context source as the session-state read-out will plug in (fixed text for the test)."""

    name: str = "state"
    title: str = "Session state"
    share: float = 0.1

    def gather(self, view: AsOfView, request: ContextRequest) -> Sequence[ContextItem]:
        return [ContextItem(self.name, f"state of {request.session}", 0)]


def test_sources_are_a_hook(acme: MemoryView) -> None:
    view = MemoryView("acme", acme.stores, encoder=acme.encoder,
                      context_sources=[SessionStateStub(), *default_sources()])
    context = view.context("Where does Ana live?", 400, session="s1")
    assert context.text.startswith("## Session state\nstate of s1\n")
    assert context.sources == ("state", "facts", "relevant", "recent")


def test_relevant_takes_the_session_and_the_tenant_in_turn(acme: MemoryView) -> None:
    from memstack.view import RelevantRecords
    from memstack.view.context import ContextRequest as Request

    at = acme.as_of()
    source = RelevantRecords(k=2)
    here = at.search("Where does Ana live?", 2, session="s2")
    everywhere = at.search("Where does Ana live?", 2)
    items = source.gather(at, Request("Where does Ana live?", 400, session="s2"))
    assert [i.event_id for i in items][:2] == [here[0].event_id, everywhere[0].event_id]
    assert {i.session for i in items} == {"s1", "s2"}
    assert len({i.event_id for i in items}) == len(items)
    alone = source.gather(at, Request("Where does Ana live?", 400))
    assert [i.event_id for i in alone] == [h.event_id for h in everywhere]
