"""Concurrent writers and readers of two tenants for 60 s against the real service.

Per tenant one writer posts small batches (messages and a fact) and keeps each acknowledged
write's token; two readers keep picking an acknowledged write and reading it back with
``after=`` (records of its session, the fact, a search), and check that no answer holds another
tenant's rows. Meanwhile a third actor forgets throwaway sessions (the stores are reopened
under the readers) and probes refusals: cross-tenant reads and writes (403), no key (401), an
oversized body (413), a malformed event (422 naming the field). At the end every acknowledged
write is read back.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest

from tests.service.conftest import Service, event, fact

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DURATION_S = 60.0
TENANTS = ("acme", "other")


@dataclass
class Shared:
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, list[tuple[str, list[str], str, str]]] = field(
        default_factory=lambda: {t: [] for t in TENANTS})
    """tenant -> (session, event ids, fact object, token) of each acknowledged write."""
    reads: int = 0
    errors: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)
        self.stop.set()


def writer(service: Service, tenant: str, shared: Shared) -> None:
    with service.client(tenant) as client:
        n = 0
        while not shared.stop.is_set():
            session = f"{tenant}-w{n}"
            batch = [event(tenant, session, f"{tenant} batch {n} line {i} about kayaks")
                     for i in range(4)]
            obj = f"{tenant}-city-{n}"
            batch.append(fact(tenant, f"user:{tenant}", "lives_in", obj))
            response = client.post(f"/v1/tenants/{tenant}/events", json={"events": batch})
            if response.status_code != 200:
                return shared.fail(f"write {tenant} {response.status_code} {response.text}")
            with shared.lock:
                shared.acked[tenant].append((session, [e["event_id"] for e in batch[:4]], obj,
                                             response.json()["position"]))
            n += 1
            time.sleep(0.15)


def reader(service: Service, tenant: str, shared: Shared, seed: int) -> None:
    rng = random.Random(seed)
    with service.client(tenant) as client:
        while not shared.stop.is_set():
            with shared.lock:
                acked = list(shared.acked[tenant])
            if not acked:
                time.sleep(0.05)
                continue
            problem = check_write(client, tenant, *rng.choice(acked), search=rng.random() < 0.3)
            if problem:
                return shared.fail(problem)
            with shared.lock:
                shared.reads += 1


def check_write(client: httpx.Client, tenant: str, session: str, ids: list[str], obj: str,
                token: str, search: bool = False) -> str | None:
    params = {"after": token, "session": session}
    rows = client.get(f"/v1/tenants/{tenant}/records", params=params)
    if rows.status_code != 200:
        return f"read {tenant} {rows.status_code} {rows.text}"
    got = rows.json()["records"]
    if {r["event_id"] for r in got} != set(ids) or {r["tenant"] for r in got} != {tenant}:
        return f"{tenant} {session} after {token}: {[r['event_id'] for r in got]} != {ids}"
    history = client.get(f"/v1/tenants/{tenant}/history",
                         params={"after": token, "subject": f"user:{tenant}"}).json()
    if obj not in {v["object"] for v in history["versions"]} or {
            v["tenant"] for v in history["versions"]} != {tenant}:
        return f"{tenant} fact {obj} missing after {token}"
    if search:
        hits = client.get(f"/v1/tenants/{tenant}/search",
                          params={"after": token, "text": "kayaks", "k": 10}).json()["hits"]
        if not hits or {h["memory"]["tenant"] for h in hits} != {tenant}:
            return f"{tenant} search returned {[h['memory']['tenant'] for h in hits]}"
    return None


def prober(service: Service, shared: Shared) -> None:
    """Forgets throwaway sessions under the readers and checks the refusals."""
    n = 0
    with service.client("acme") as client:
        while not shared.stop.wait(3.0):
            session = f"throwaway-{n}"
            n += 1
            sent = client.post("/v1/tenants/acme/events",
                               json={"events": [event("acme", session, "forget me soon")]})
            forgot = client.post("/v1/tenants/acme/forget",
                                 json={"scope": {"type": "session", "session": session}})
            gone = client.get("/v1/tenants/acme/records", params={
                "session": session, "after": forgot.json()["position"]})
            problems = [
                (sent.status_code, 200), (forgot.status_code, 200), (gone.json()["records"], []),
                (client.get("/v1/tenants/other/records").status_code, 403),
                (client.post("/v1/tenants/other/events", json={
                    "events": [event("other", "x", "sneaky")]}).status_code, 403),
                (client.post("/v1/tenants/acme/events", json={
                    "events": [event("other", "x", "sneaky")]}).status_code, 403),
                (httpx.get(f"{service.url}/v1/tenants/acme/records").status_code, 401),
                (client.post("/v1/tenants/acme/events", content=b"x" * (5 << 20),
                             headers={"content-type": "application/json"}).status_code, 413),
            ]
            bad = client.post("/v1/tenants/acme/events", json={
                "events": [{**event("acme", "x", "y"), "session": ""}]})
            problems.append((bad.status_code == 422 and "events[0].session" in bad.text, True))
            wrong = [f"got {got!r}, expected {want!r}" for got, want in problems if got != want]
            if wrong:
                return shared.fail(f"probe {n}: {wrong}")


def test_two_tenants_write_and_read_concurrently(service: Service) -> None:
    shared = Shared()
    threads = [threading.Thread(target=writer, args=(service, t, shared)) for t in TENANTS]
    threads += [threading.Thread(target=reader, args=(service, t, shared, i))
                for t in TENANTS for i in range(2)]
    threads.append(threading.Thread(target=prober, args=(service, shared)))
    for thread in threads:
        thread.start()
    shared.stop.wait(DURATION_S)
    shared.stop.set()
    for thread in threads:
        thread.join(120)
    assert not shared.errors, shared.errors[:3]
    total = {t: len(shared.acked[t]) for t in TENANTS}
    assert all(n >= 20 for n in total.values()), total
    assert shared.reads >= 100, shared.reads
    with service.client("acme") as acme, service.client("other") as other:
        for tenant, client in (("acme", acme), ("other", other)):
            for write in shared.acked[tenant]:
                assert check_write(client, tenant, *write) is None
