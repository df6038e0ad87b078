"""Property (hypothesis, against the real service): for random interleavings of writes, forgets
and reads, a read ``after=`` a write's token includes that write (unless a forget of it was
asked before the read), and a read ``after=`` a forget's token never returns the forgotten
content (neither in records nor in search).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.service.conftest import Service, event

pytestmark = pytest.mark.timeout(900)

WORDS = ["heron", "maple", "quartz", "violet", "anchor", "cobalt", "ember", "fjord"]

ops = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, 2), st.sampled_from(WORDS)),
    st.tuples(st.just("forget"), st.integers(0, 20), st.just("")),
    st.tuples(st.just("read"), st.integers(0, 20), st.just("")),
), min_size=2, max_size=7).filter(lambda xs: sum(x[0] == "forget" for x in xs) <= 2)


@dataclass
class Run:
    client: httpx.Client
    run_id: str
    writes: list[tuple[str, str, str, str]] = field(default_factory=list)
    """(event id, session, text, token) of each write."""
    forgets: list[tuple[str, str]] = field(default_factory=list)
    """(event id forgotten, token) of each forget."""
    asked_to_forget: set[str] = field(default_factory=set)

    def do(self, op: str, n: int, word: str) -> None:
        if op == "write":
            session = f"{self.run_id}-s{n}"
            text = f"{self.run_id} {word} note {len(self.writes)}"
            sent = event("acme", session, text)
            body = self.post("events", {"events": [sent]})
            self.writes.append((sent["event_id"], session, text, body["position"]))
        elif op == "forget" and self.writes:
            event_id = self.writes[n % len(self.writes)][0]
            body = self.post("forget", {"scope": {"type": "event", "event_id": event_id}})
            self.asked_to_forget.add(event_id)
            self.forgets.append((event_id, body["position"]))
        elif op == "read":
            self.read(n)

    def read(self, n: int) -> None:
        pairs = [("w", i) for i in range(len(self.writes))] + [
            ("f", i) for i in range(len(self.forgets))]
        if not pairs:
            return
        what, i = pairs[n % len(pairs)]
        if what == "w":
            event_id, session, _, token = self.writes[i]
            ids = {r["event_id"] for r in self.records(session, token)}
            assert event_id in ids or event_id in self.asked_to_forget
        else:
            event_id, token = self.forgets[i]
            session, text = next((s, t) for e, s, t, _ in self.writes if e == event_id)
            assert event_id not in {r["event_id"] for r in self.records(session, token)}
            hits = self.get("search", {"text": text, "k": 20, "after": token})["hits"]
            assert all(h["memory"]["event_id"] != event_id for h in hits)

    def records(self, session: str, token: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.get("records", {"session": session,
                                                          "after": token})["records"]
        return rows

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.client.post(f"/v1/tenants/acme/{path}", json=body)
        assert response.status_code == 200, response.text
        out: dict[str, Any] = response.json()
        return out

    def get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        response = self.client.get(f"/v1/tenants/acme/{path}", params=params)
        assert response.status_code == 200, response.text
        out: dict[str, Any] = response.json()
        return out


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=ops)
def test_after_tokens_read_writes_and_never_forgotten(service: Service,
                                                      steps: list[tuple[str, int, str]]) -> None:
    with service.client() as client:
        run = Run(client, uuid.uuid4().hex[:8])
        for op, n, word in steps:
            run.do(op, n, word)
        for n in range(len(run.writes) + len(run.forgets)):
            run.read(n)  # every token is checked at least once, at the end
