"""The memory inspector in a real headless Chromium against the real service.

A user opens ``/ui``, types a key and a tenant, picks a subject and moves the as-of slider
with the keyboard: at every step the versions table, the facts table and the timeline show
what the API answers for that known time (asked directly here), and versions appear, close
and are re-cut. Then a search with its score parts, a row's provenance with its log position
and lineage, a retraction written from the page, a change arriving over the feed, and a
forget followed to ``audited``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from memstack.schemas.ids import uuid7
from tests.service.conftest import KEYS, Service

pytestmark = pytest.mark.timeout(300)

TENANT = "acme"
ANA = "user:ana"


def _event(kind: str, payload: dict[str, Any], *, session: str = "ui-s1",
           subject: str | None = ANA, **extra: Any) -> dict[str, Any]:
    out = {"event_id": str(uuid7()), "tenant": TENANT, "agent": "tester", "session": session,
           "kind": kind, "occurred_at": "2026-11-30T12:00:00Z",
           "provenance": {"source": "test", "authority": "user"}, "payload": payload, **extra}
    if subject is not None:
        out["subject"] = subject
    return out


def _fact(subject: str, relation: str, obj: str, valid_from: str) -> dict[str, Any]:
    return _event("fact_asserted", {"relation": relation, "object": obj}, session="facts",
                  subject=subject, valid_from=valid_from)


def _message(text: str) -> dict[str, Any]:
    return _event("message", {"role": "user", "text": text})


SEED = [
    [_fact(ANA, "lives_in", "Lisbon", "2019-05-01T00:00:00Z"),
     _message("Hi, I'm Ana. I live in Lisbon, near the river."),
     _fact("user:bob", "works_at", "Acme", "2024-01-01T00:00:00Z")],
    [_fact(ANA, "lives_in", "Porto", "2026-04-01T00:00:00Z"),
     _message("I moved to Porto in April.")],
    [_fact(ANA, "lives_in", "Braga", "2026-04-01T00:00:00Z"),  # the correction
     _message("Correction: it was Braga, not Porto."),
     _message("My cat Miso sleeps on the balcony all day.")],
]
CAT = SEED[2][2]["event_id"]


class Api:
    """The same API the page reads, asked directly to check the page against it."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def get(self, route: str, **params: Any) -> Any:
        response = self.client.get(f"/v1/tenants/{TENANT}/{route}", params=params)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def api(ui_service: Service) -> Iterator[Api]:
    with ui_service.client() as client:
        position = ""
        for batch in SEED:  # one POST per step, so each step has its own log time
            response = client.post(f"/v1/tenants/{TENANT}/events", json={"events": batch})
            assert response.status_code == 200, response.text
            position = response.json()["position"]
            time.sleep(0.05)
        checked = Api(client)
        checked.get("records", after=position, limit=1)  # the stores applied the seed
        yield checked


@pytest.fixture(scope="module")
def page(browser: Any, ui_service: Service, api: Api) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    opened = context.new_page()
    opened.set_default_timeout(60_000)
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.goto(f"{ui_service.url}/ui/")
    opened.fill("#key", KEYS["acme"])
    opened.fill("#tenant", TENANT)
    opened.click("#connect-go")
    opened.wait_for_selector(f'#subjects li[data-subject="{ANA}"]')
    yield opened
    context.close()
    assert not errors, errors


def _rows(page: Any, table: str) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = page.eval_on_selector_all(
        f"#{table} tbody tr", "rows => rows.map(r => ({...r.dataset, text: r.innerText}))")
    return rows


def _steps(api: Api) -> list[str]:
    versions = api.get("history", subject=ANA)["versions"]
    times = {v["tt_from"] for v in versions} | {v["tt_to"] for v in versions if v["tt_to"]}
    return sorted(times, key=lambda t: datetime.fromisoformat(t.replace("Z", "+00:00")))


def test_subjects_match_the_api(page: Any, api: Api) -> None:
    shown = page.eval_on_selector_all("#subjects li", "items => items.map(i => i.dataset.subject)")
    assert shown == [s["subject"] for s in api.get("subjects")["subjects"]]
    assert {ANA, "user:bob"} <= set(shown)


def test_the_slider_replays_known_time(page: Any, api: Api) -> None:
    page.click(f'#subjects li[data-subject="{ANA}"]')
    steps = _steps(api)
    assert len(steps) == 3  # Lisbon; Porto (Lisbon re-cut); Braga (Porto closed)
    page.wait_for_selector(f'#versions[data-known="{steps[-1]}"]')
    assert page.get_attribute("#known-slider", "max") == str(len(steps) - 1)
    page.focus("#known-slider")
    page.keyboard.press("Home")
    seen = []
    for index, known in enumerate(steps):
        if index:
            page.keyboard.press("ArrowRight")  # a user moving the slider
        page.wait_for_selector(f'#versions[data-known="{known}"]')
        history = api.get("history", subject=ANA, known=known)["versions"]
        facts = api.get("facts", subject=ANA, known=known)["facts"]
        shown = [(r["versionId"], r["status"]) for r in _rows(page, "versions")]
        assert shown == [(v["version_id"], "closed" if v["tt_to"] else "current")
                         for v in history]
        assert [r["versionId"] for r in _rows(page, "facts")] == [f["version_id"]
                                                                 for f in facts]
        bars = page.eval_on_selector_all("#timeline g.version.current",
                                         "gs => gs.map(g => g.dataset.versionId)")
        assert sorted(bars) == sorted(v["version_id"] for v in history if not v["tt_to"])
        assert page.text_content("#known-label") == known
        seen.append(([f["object"] for f in facts],
                     sorted(v["object"] for v in history if v["tt_to"])))
    # versions appear, close and are re-cut: Lisbon, then Porto (Lisbon closed and re-cut to
    # end in April), then the correction Braga (Porto closed)
    assert seen == [(["Lisbon"], []), (["Porto"], ["Lisbon"]), (["Braga"], ["Lisbon", "Porto"])]
    page.fill("#valid", "2026-03-15")  # valid before the move, as known at the last step
    page.press("#valid", "Enter")
    page.wait_for_selector('#facts[data-valid="2026-03-15"]')
    facts = api.get("facts", subject=ANA, valid="2026-03-15", known=steps[-1])["facts"]
    assert [f["object"] for f in facts] == ["Lisbon"]
    assert [r["versionId"] for r in _rows(page, "facts")] == [f["version_id"] for f in facts]
    page.fill("#valid", "now")
    page.press("#valid", "Enter")
    page.wait_for_selector('#facts[data-valid="now"]')


def test_search_shows_the_score_parts(page: Any, api: Api) -> None:
    page.fill("#search-text", "where does Ana live")
    page.select_option("#search-mode", "hybrid")
    page.click("#search-go")
    page.wait_for_selector('#hits[data-query="where does Ana live"]')
    hits = api.get("search", text="where does Ana live", mode="hybrid", k=10)["hits"]
    rows = _rows(page, "hits")
    assert [r["eventId"] for r in rows] == [h["memory"]["event_id"] for h in hits]
    fused = page.eval_on_selector_all('#hits td[data-field="fused"]',
                                      "cells => cells.map(c => c.innerText)")
    assert fused == [f"{h['score']['fused']:.4f}" for h in hits]
    assert any(h["score"]["bm25_rank"] and h["score"]["vector_rank"] for h in hits)


def test_provenance_shows_log_position_and_lineage(page: Any, api: Api) -> None:
    row = _rows(page, "versions")[0]
    version = next(v for v in api.get("history", subject=ANA)["versions"]
                   if v["version_id"] == row["versionId"])
    page.click(f'#versions tr[data-version-id="{row["versionId"]}"]')
    source = version["source_event_id"]
    page.wait_for_selector(f'#provenance[data-event-id="{source}"]')
    expected = api.get(f"events/{source}")
    assert page.text_content('#prov-fields dd[data-field="log position"]') == (
        f"partition {expected['log']['partition']}, offset {expected['log']['offset']}")
    for what in ("opened", "closed", "asserted"):
        shown = page.eval_on_selector_all(f'[data-lineage="{what}"] li',
                                          "items => items.map(i => i.dataset.versionId)")
        assert shown == [v["version_id"] for v in expected[f"versions_{what}"]]


def test_a_messages_provenance_shows_its_sessions_state_and_size(page: Any, api: Api,
                                                                 ui_service: Service) -> None:
    moved = SEED[1][1]["event_id"]
    state = api.get("sessions/ui-s1/state")
    assert state["items"] == {"facts": 0, "turns": 4} and state["ring_turns"] == 4
    assert state["ring_capacity"] == 204 and state["ring_bits"] == 192
    assert 8185 <= state["bytes"] <= 8192 + 64  # the default state; marks add a few bytes
    page.fill("#search-text", "I moved to Porto")
    page.click("#search-go")
    page.wait_for_selector(f'#hits tr[data-event-id="{moved}"]')
    page.click(f'#hits tr[data-event-id="{moved}"]')
    page.wait_for_selector(f'#provenance[data-event-id="{moved}"]')
    shown = page.text_content('#prov-fields dd[data-field="session state"]')
    assert shown == (f"{state['bytes']:,} bytes: items facts 0, turns 4; its code ring holds 4 "
                     "of 204 turns (192-bit codes)")
    with ui_service.client() as client:
        missing = client.get(f"/v1/tenants/{TENANT}/sessions/no-such-session/state")
    assert missing.status_code == 404 and "no-such-session" in missing.text


def test_retract_from_the_page_and_follow_the_feed(page: Any, api: Api,
                                                   ui_service: Service) -> None:
    braga = api.get("facts", subject=ANA, relation="lives_in")["facts"]
    assert [f["object"] for f in braga] == ["Braga"]
    page.click(f'#facts tr[data-version-id="{braga[0]["version_id"]}"]')
    page.wait_for_selector(f'#provenance[data-event-id="{braga[0]["source_event_id"]}"]')
    page.click("#retract")
    page.wait_for_function("() => document.body.dataset.lastWrite")
    written, position = page.evaluate(
        "() => [document.body.dataset.lastWrite, document.body.dataset.lastPosition]")
    retraction = api.get(f"events/{written}", after=position)
    assert retraction["kind"] == "fact_retracted" and retraction["fact"]["object"] == "Braga"
    page.wait_for_function("() => !document.querySelector('#facts tbody tr')")
    assert api.get("facts", subject=ANA, relation="lives_in")["facts"] == []
    page.wait_for_selector('#feed li[data-type="fact_version_closed"]')
    # a write by someone else reaches the page through the change feed, without a click
    with ui_service.client() as other:
        new = _fact(ANA, "works_at", "Tagus Labs", "2026-05-01T00:00:00Z")
        assert other.post(f"/v1/tenants/{TENANT}/events",
                          json={"events": [new]}).status_code == 200
    page.wait_for_function(
        "() => [...document.querySelectorAll('#facts td[data-field=object]')]"
        ".some(td => td.innerText === 'Tagus Labs')")
    assert [r["versionId"] for r in _rows(page, "facts")] == [
        f["version_id"] for f in api.get("facts", subject=ANA)["facts"]]


def test_forget_from_the_page_until_audited(page: Any, api: Api) -> None:
    page.fill("#search-text", "cat sleeping on the balcony")
    page.click("#search-go")
    page.wait_for_selector(f'#hits tr[data-event-id="{CAT}"]')
    page.click(f'#hits tr[data-event-id="{CAT}"]')
    page.wait_for_selector(f'#provenance[data-event-id="{CAT}"]')
    page.click("#forget-event")
    page.wait_for_selector('#forgets li[data-status="audited"]', timeout=120_000)
    request_id = page.get_attribute("#forgets li", "data-request-id")
    status = api.get(f"forget/{request_id}")
    assert status["status"] == "audited" and status["audit"]["passed"] is True
    assert "passed" in page.text_content("#forgets li .audit")
    hits = api.get("search", text="cat sleeping on the balcony", k=10)["hits"]
    assert CAT not in {h["memory"]["event_id"] for h in hits}
    page.wait_for_selector("#provenance", state="hidden")  # the forgotten event is gone
    page.wait_for_selector(f'#hits tr[data-event-id="{CAT}"]', state="detached")
    assert [r["eventId"] for r in _rows(page, "hits")] == [h["memory"]["event_id"]
                                                           for h in hits]
    page.wait_for_selector('#feed li[data-type="forgotten"]')
