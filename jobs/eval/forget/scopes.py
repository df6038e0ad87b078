"""The forget evaluation's data and request generator.

:func:`emit_locomo` writes LoCoMo conversations as events (each conversation a tenant, each
session a session, each speaker a subject; turns are messages, per-session observations
multi-valued facts and ``last_session`` a single-valued one). :func:`pick_scopes` chooses the
requests so that **every one** forgets something not forgotten before and leaves messages of
its tenant outside every scope so far (what preservation checks); a tenant request keeps the
messages logged after it (its tenant's last session, emitted after the request). A mix it
cannot satisfy raises :class:`GeneratorError`: a request with nothing to check is never a
pass.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime

from memstack.foundation.builders import EventBuilder
from memstack.foundation.errors import MemstackError
from memstack.jobs.eval.forget.oracle import matches
from memstack.schemas.events import Event, ForgetScope

Scope = tuple[str, ForgetScope]
KINDS = ("event", "fact", "session", "subject")


class GeneratorError(MemstackError):
    """The generator cannot make a request that forgets something and keeps something."""


def when(text: str) -> datetime:
    return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def emit_locomo(client: EventBuilder, conv: dict[str, object],
                last: bool | None = None) -> list[Event]:
    """Emit one conversation (with a :class:`MemoryClient`; a bare builder only builds it):
    every session, or (``last``) only its last one, or (``last`` False) all but the last."""
    c, tenant, out = conv["conversation"], str(conv["sample_id"]), []
    assert isinstance(c, dict)
    obs = conv.get("observation") or {}
    assert isinstance(obs, dict)
    n = 1
    while f"session_{n}" in c:
        s, at = f"session_{n}", when(c[f"session_{n}_date_time"])
        if last is None or last == (f"session_{n + 1}" not in c):
            for turn in c[s]:
                out.append(client.message(s, "user", turn["text"], tenant=tenant,
                                          subject=turn["speaker"], occurred_at=at))
            for speaker, facts in (obs.get(f"{s}_observation") or {}).items():
                for text, *_ in facts:
                    out.append(client.fact(s, speaker, "observed", text, tenant=tenant,
                                           occurred_at=at))
                out.append(client.fact(s, speaker, "last_session", s, tenant=tenant,
                                       occurred_at=at))
        n += 1
    return out


def is_item(e: Event) -> bool:
    """What preservation checks: a message with text."""
    return e.kind == "message" and bool(e.text())


def candidates(events: Sequence[Event], kind: str, rng: random.Random) -> list[Scope]:
    """Every scope of ``kind`` the events allow, shuffled."""
    out: list[Scope]
    if kind == "event":
        out = [(e.tenant, ForgetScope(type="event", event_id=e.event_id))
               for e in events if is_item(e)]
    elif kind == "fact":
        out = []
        for e in events:
            if e.kind == "fact_asserted":
                obj = getattr(e.payload, "object", None) if rng.random() < 0.7 else None
                out.append((e.tenant, ForgetScope(type="fact", subject=e.subject,
                                                  relation=getattr(e.payload, "relation", ""),
                                                  object=obj)))
    elif kind == "session":
        out = [(t, ForgetScope(type="session", session=s))
               for t, s in sorted({(e.tenant, e.session) for e in events})]
    else:
        out = [(t, ForgetScope(type="subject", subject=s))
               for t, s in sorted({(e.tenant, e.subject) for e in events if e.subject})]
    rng.shuffle(out)
    return out


def pick_scopes(events: Sequence[Event], mix: dict[str, int], rng: random.Random,
                later: Sequence[Event] = ()) -> list[Scope]:
    """``mix[kind]`` requests of each kind over ``events`` (what the stores hold before the
    requests), then one tenant request per tenant of ``later`` (the events of ``events``
    logged after their tenant's request, which it must keep). Each forgets something new and
    keeps at least one message of its tenant; raises :class:`GeneratorError` when the mix
    cannot."""
    gone: set[str] = set()
    keep: dict[str, set[str]] = {e.tenant: set() for e in events}
    for e in events:
        if is_item(e):
            keep[e.tenant].add(e.event_id)
    last = {t: {e.event_id for e in later if e.tenant == t and is_item(e)}
            for t in {e.tenant for e in later}}
    out: list[Scope] = []
    for kind in KINDS:
        taken = 0
        for tenant, scope in candidates(events, kind, rng):
            if taken == mix.get(kind, 0):
                break
            covered = {e.event_id for e in events if matches(scope, tenant, e)}
            after = gone | covered
            if covered - gone and keep[tenant] - after and (
                    tenant not in last or last[tenant] - after):
                gone, taken = after, taken + 1
                out.append((tenant, scope))
        if taken < mix.get(kind, 0):
            raise GeneratorError(f"only {taken} of {mix[kind]} {kind} requests forget "
                                 "something new and keep something of their tenant")
    late = {e.event_id for e in later}
    for tenant in sorted(last):
        before = {e.event_id for e in events if e.tenant == tenant and e.event_id not in late}
        if not before - gone or not last[tenant] - gone:
            raise GeneratorError(f"the tenant request of {tenant} forgets or keeps nothing")
        out.append((tenant, ForgetScope(type="tenant")))
    return out


def tenants_to_forget(convs: Sequence[dict[str, object]], count: int,
                      rng: random.Random) -> set[str]:
    """The tenants that get a tenant request (conversations of two sessions at least)."""
    names = sorted(str(c["sample_id"]) for c in convs
                   if isinstance(c["conversation"], dict) and "session_2" in c["conversation"])
    if len(names) < count:
        raise GeneratorError(f"{count} tenant requests asked, {len(names)} tenants can have one")
    return set(rng.sample(names, count))
