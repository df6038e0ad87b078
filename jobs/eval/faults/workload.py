"""The workload of a fault-injection history: agents writing, reading and forgetting over HTTP.

Per tenant, a **writer** posts small batches (a message, a tool call, a fact; every text
carries a unique marker token ``mk_<tenant>_<serial>_q``) and retries a batch with the same
event ids until it is acknowledged (the service is idempotent by id), so faults show as
``unavailable`` requests, never as lost intent. Every tenth batch goes to a session the
**forgetter** later forgets (one request per session; it then reads with ``after=`` the
forget's position and records what it saw). A **reader** per tenant picks acknowledged writes
and reads them back with ``after=`` their position (records of the session, and a search for
the marker), recording what it saw; answers other than 200 count as unavailable.
"""

from __future__ import annotations

import random
import re
import threading
import time
from typing import Any

import httpx

from memstack.jobs.eval.faults.deploy import TENANTS, Deployment
from memstack.jobs.eval.faults.history import Forget, History, Read, Write
from memstack.schemas.ids import uuid7

TOKEN = re.compile(r"mk_[a-z0-9]+_\d{6}_q")
WRITE_PAUSE_S = 0.4
READ_PAUSE_S = 0.3
FORGET_EVERY_S = 4.0
DOOMED_EVERY = 10


def session_of(tenant: str, batch_no: int) -> tuple[str, bool]:
    """The session of a tenant's ``batch_no``-th batch and whether it is doomed (forgotten
    later). Doomed sessions hold one batch each: a session forget erases the whole session,
    and the history knows the one batch it erases."""
    doomed = batch_no % DOOMED_EVERY == DOOMED_EVERY - 1
    return (f"doom-{tenant}-{batch_no}" if doomed else f"w{batch_no // 15}"), doomed


def _event(tenant: str, session: str, kind: str, token: str) -> dict[str, Any]:
    common = {"event_id": str(uuid7()), "tenant": tenant, "agent": "faults",
              "session": session, "occurred_at": "2026-11-30T12:00:00Z",
              "provenance": {"source": "faults", "authority": "agent"}}
    if kind == "message":
        return {**common, "kind": kind,
                "payload": {"role": "user", "text": f"note {token} about the garden shed"}}
    if kind == "tool_call":
        return {**common, "kind": kind, "payload": {
            "tool": "lookup", "call_id": f"call-{token}", "arguments": {"q": token}}}
    return {**common, "kind": "fact_asserted", "subject": f"user:{session}",
            "payload": {"relation": "likes", "object": f"plants {token}"}}


class Workload:
    """The threads of one deployment; ``start()``, run faults, ``stop()``."""

    def __init__(self, deployed: Deployment, history: History, seed: int) -> None:
        self.deployed = deployed
        self.history = history
        self.seed = seed
        self.halt = threading.Event()
        self.serial = 0
        self.batches: dict[str, int] = {}
        """Per tenant, batches begun so far: numbering goes on across stop() and start(), so a
        session name is never reused (a reused doomed session would be forgotten twice over)."""
        self.lock = threading.Lock()
        self.doomed: list[Write] = []
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def _next_token(self, tenant: str) -> str:
        with self.lock:
            self.serial += 1
            return f"mk_{tenant}_{self.serial:06d}_q"

    def start(self) -> None:
        self.halt.clear()
        targets: list[tuple[Any, tuple[Any, ...]]] = []
        for i, tenant in enumerate(TENANTS):
            targets.append((self._writer, (tenant, random.Random(self.seed * 31 + i))))
            targets.append((self._reader, (tenant, random.Random(self.seed * 37 + i))))
        targets.append((self._forgetter, (random.Random(self.seed * 41),)))
        self.threads = [threading.Thread(target=self._guard, args=(fn, args), daemon=True)
                        for fn, args in targets]
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.halt.set()
        for thread in self.threads:
            thread.join(120)

    def _guard(self, fn: Any, args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # reported by the runner: a workload bug, not a fault
            self.errors.append(exc)

    def _client(self, tenant: str) -> httpx.Client:
        return self.deployed.client(tenant)

    def _next_batch(self, tenant: str) -> int:
        with self.lock:
            batch_no = self.batches.get(tenant, 0)
            self.batches[tenant] = batch_no + 1
            return batch_no

    def _writer(self, tenant: str, rng: random.Random) -> None:
        while not self.halt.is_set():
            session, doomed = session_of(tenant, self._next_batch(tenant))
            kinds = rng.sample(["message", "tool_call", "fact_asserted"], rng.randint(1, 3))
            tokens = [self._next_token(tenant) for _ in kinds]
            events = [_event(tenant, session, k, t) for k, t in zip(kinds, tokens, strict=True)]
            answer, _ = self._post_until_acked(tenant, "events", {"events": events})
            if answer is None:
                return  # halted before the write was acknowledged: not part of the history
            write = Write(tenant, session, tuple(e["event_id"] for e in events), tuple(kinds),
                          tuple(tokens), answer["position"], time.monotonic(), doomed)
            self.history.add(write)
            if doomed:
                with self.lock:
                    self.doomed.append(write)
            self.halt.wait(WRITE_PAUSE_S)

    def _post_until_acked(self, tenant: str, route: str,
                          body: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
        """The answer once acknowledged (None: halted first) and whether a request was sent
        without a definite answer (then the service may have logged it all the same)."""
        unanswered = False
        while not self.halt.is_set():
            try:
                with self._client(tenant) as client:
                    answer = client.post(f"/v1/tenants/{tenant}/{route}", json=body)
                if answer.status_code == 200:
                    result: dict[str, Any] = answer.json()
                    return result, unanswered
                if 400 <= answer.status_code < 500 and answer.status_code not in (408, 429):
                    raise AssertionError(f"the workload's own {route} was refused: "
                                         f"{answer.status_code} {answer.text[:300]}")
                unanswered = unanswered or answer.status_code >= 500 or answer.status_code == 408
            except httpx.HTTPError:
                unanswered = True
            self.history.missed()
            self.halt.wait(0.5)
        return None, unanswered

    def _reader(self, tenant: str, rng: random.Random) -> None:
        while not self.halt.is_set():
            with self.history.lock:
                mine = [w for w in self.history.writes if w.tenant == tenant and not w.doomed]
            if mine:
                self._read_back(tenant, rng.choice(mine[-50:]), rng)
            self.halt.wait(READ_PAUSE_S)

    def _read_back(self, tenant: str, write: Write, rng: random.Random) -> None:
        records = tuple(e for e, k in zip(write.event_ids, write.kinds, strict=True)
                        if k != "fact_asserted")
        if rng.random() < 0.3:
            route, params = "search", {"text": write.tokens[0], "k": 5, "mode": "text"}
            expected: tuple[str, ...] = ()
        else:
            route, params, expected = "records", {"session": write.session}, records
        answer = self._get(tenant, route, {**params, "after": write.position})
        if answer is None:
            return
        rows = answer.get("records") or [h.get("memory", {}) for h in answer.get("hits", [])]
        self.history.add(_read_of(tenant, route, write.position, expected, rows))

    def _get(self, tenant: str, route: str, params: dict[str, Any]) -> dict[str, Any] | None:
        try:
            with self._client(tenant) as client:
                answer = client.get(f"/v1/tenants/{tenant}/{route}", params=params)
        except httpx.HTTPError:
            self.history.missed()
            return None
        if answer.status_code != 200:
            self.history.missed()
            return None
        body: dict[str, Any] = answer.json()
        return body

    def _forgetter(self, rng: random.Random) -> None:
        while not self.halt.wait(FORGET_EVERY_S * rng.uniform(0.5, 1.5)):
            with self.lock:
                if not self.doomed:
                    continue
                write = self.doomed.pop(rng.randrange(len(self.doomed)))
            body = {"scope": {"type": "session", "session": write.session},
                    "reason": "fault suite"}
            answer, unanswered = self._post_until_acked(write.tenant, "forget", body)
            if answer is None:
                if unanswered:  # sent, never answered: it may be in the log all the same
                    self.history.unsure(write)
                return
            self.history.add(Forget(write.tenant, write.session, answer["request_id"],
                                    answer["position"], write.tokens, write.event_ids,
                                    time.monotonic()))
            self._probe_forgotten(write, answer["position"])

    def _probe_forgotten(self, write: Write, position: str) -> None:
        for route, params in (("records", {"session": write.session}),
                              ("search", {"text": write.tokens[0], "k": 5, "mode": "text"})):
            answer = self._get(write.tenant, route, {**params, "after": position})
            if answer is not None:
                rows = answer.get("records") or [h.get("memory", {})
                                                 for h in answer.get("hits", [])]
                self.history.add(_read_of(write.tenant, route, position, (), rows))


def _read_of(tenant: str, route: str, after: str, expected: tuple[str, ...],
             rows: list[dict[str, Any]]) -> Read:
    text = " ".join(str(r) for r in rows)
    return Read(tenant, route, after, expected,
                tuple(str(r.get("event_id")) for r in rows),
                tuple(str(r["tenant"]) for r in rows if "tenant" in r),
                tuple(TOKEN.findall(text)), time.monotonic())
