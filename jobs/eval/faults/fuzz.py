"""Hostile inputs for the events topic and the HTTP API (pure: bytes and labels, no I/O).

Each :class:`Hostile` starts from a valid event of the documented JSON and applies one
mutation. ``surely_bad`` says the mutation must make the event invalid whatever the bytes
(the validator missing one is a failure); bit flips and hostile-but-legal names may or may not
leave a valid event, so for those the project's parser decides (``expected_valid``) and a
valid one must then be stored verbatim.

Mutations: ``bit_flip``, ``truncate``, ``wrong_type``, ``huge_string`` (over the 1,000,000
character limit of a text), ``deep_nesting``, ``invalid_utf8``, ``naive_time``,
``unknown_kind``, ``unknown_version``, ``missing_field``, ``not_json``, ``bad_event_id``,
``empty_name``, ``tenant_mismatch`` (HTTP only: refused with 403), and ``hostile_name``
(SQL, Lance filter and path injection, control characters: legal names that must be stored as
they are).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import parse_event
from memstack.schemas.ids import uuid7

HOSTILE_NAMES = (
    "'; DROP TABLE records; --", "x' OR '1'='1", "\" OR 1=1 --", "session`); DELETE FROM x",
    "../../../../etc/passwd", "a\\'b", "tenant = 'other'", "%s%s%s%n", "${jndi:ldap://x}",
    "<script>alert(1)</script>", "\u202eevil", "line\nbreak", "tab\there", "nul\u0000byte",
    "emoji-\U0001f600", "' OR event_id IS NOT NULL OR '", "memories WHERE 1=1",
)
SURE = ("truncate", "wrong_type", "huge_string", "deep_nesting", "invalid_utf8",
        "naive_time", "unknown_kind", "unknown_version", "missing_field", "not_json",
        "bad_event_id", "empty_name")
MAYBE = ("bit_flip", "hostile_name")
HUGE = 1_000_001


@dataclass(frozen=True)
class Hostile:
    mutation: str
    data: bytes
    surely_bad: bool

    @property
    def expected_valid(self) -> bool:
        """What the project's parser says of ``data`` (the oracle for DLQ accounting)."""
        return is_valid(self.data)


def is_valid(data: bytes) -> bool:
    try:
        parse_event(data)
    except InvalidEventError:
        return False
    return True


def base_event(rng: random.Random, tenant: str, session: str) -> dict[str, Any]:
    """A valid event: a message, a tool call or a fact, with a marker text."""
    common = {"event_id": str(uuid7()), "tenant": tenant, "agent": "fuzzer",
              "session": session, "occurred_at": "2026-11-30T12:00:00Z",
              "provenance": {"source": "fuzz", "authority": "agent"}}
    text = f"fuzz base {rng.randrange(10**9)}"
    choice = rng.randrange(3)
    if choice == 0:
        return {**common, "kind": "message", "payload": {"role": "user", "text": text}}
    if choice == 1:
        return {**common, "kind": "tool_call",
                "payload": {"tool": "search", "call_id": f"c{rng.randrange(999)}",
                            "arguments": {"q": text}}}
    return {**common, "kind": "fact_asserted", "subject": "user:fuzz",
            "payload": {"relation": "likes", "object": text}}


def _dumps(event: Any) -> bytes:
    return json.dumps(event, ensure_ascii=False).encode()


def _set(event: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(event))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def _text_path(event: dict[str, Any]) -> tuple[str, ...]:
    if event["kind"] == "message":
        return ("payload", "text")
    if event["kind"] == "tool_call":
        return ("payload", "tool")
    return ("payload", "object")


def _nest(depth: int) -> bytes:
    """JSON nested ``depth`` levels deep, written as text (too deep for ``json.dumps``)."""
    return b'{"a": [' * depth + b'"bottom"' + b"]}" * depth


def _nested(rng: random.Random, event: dict[str, Any]) -> bytes:
    marker = "NESTED-PAYLOAD"
    return _dumps(_set(event, ("payload",), marker)).replace(
        f'"{marker}"'.encode(), _nest(rng.randrange(200, 3000)))


REQUIRED = ("event_id", "tenant", "kind", "occurred_at", "payload", "session", "agent")


def _without(event: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != name}


def _wrong_type(rng: random.Random, event: dict[str, Any]) -> bytes:
    """A field of another JSON type. Numbers are not offered for ``occurred_at``: pydantic's
    lax mode reads them as epoch seconds (UTC), a valid time (noted in docs/operations.md)."""
    field = rng.choice(["tenant", "session", "occurred_at", "payload", "kind", "provenance"])
    values: list[Any] = [["list"], {"o": 1}, True] + ([] if field == "occurred_at" else [42, 3.5])
    return _dumps(_set(event, (field,), rng.choice(values)))


MUTATIONS: dict[str, Callable[[random.Random, dict[str, Any]], bytes]] = {
    "truncate": lambda r, e: _dumps(e)[:r.randrange(1, len(_dumps(e)) - 1)],
    "wrong_type": _wrong_type,
    "huge_string": lambda r, e: _dumps(_set(e, _text_path(e), "A" * HUGE))
    if e["kind"] != "tool_call" else _dumps(_set(e, ("session",), "s" * 300)),
    "deep_nesting": _nested,
    "invalid_utf8": lambda r, e: _dumps(e).replace(b"fuzz", b"\xff\xfe\xc3\x28", 1)
    if b"fuzz" in _dumps(e) else b"\xc3\x28" + _dumps(e),
    "naive_time": lambda r, e: _dumps(_set(e, ("occurred_at",), r.choice([
        "2026-11-30T12:00:00", "2026-11-30 12:00", "yesterday", "2026-13-45T99:00:00Z"]))),
    "unknown_kind": lambda r, e: _dumps(_set(e, ("kind",), r.choice([
        "fact_exploded", "MESSAGE", "", "forget_everything", "message; DROP"]))),
    "unknown_version": lambda r, e: _dumps({**e, "schema_version": r.choice([0, 2, 99, -1])}),
    "missing_field": lambda r, e: _dumps(_without(e, r.choice(REQUIRED))),
    "not_json": lambda r, e: r.choice([b"", b"null", b"[]", b"42", b"\"str\"", b"{",
                                       b"{not json}", bytes(r.randrange(256) for _ in range(40))]),
    "bad_event_id": lambda r, e: _dumps({**e, "event_id": r.choice([
        "not-a-uuid", "00000000-0000-0000-0000-000000000000", "", "../../x"])}),
    "empty_name": lambda r, e: _dumps({**e, r.choice(["tenant", "session", "agent"]): ""}),
    "bit_flip": lambda r, e: _flip(r, _dumps(e)),
    "hostile_name": lambda r, e: _dumps({**e, "session": r.choice(HOSTILE_NAMES),
                                         "agent": r.choice(HOSTILE_NAMES)}),
}


def _flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def hostile_events(rng: random.Random, n: int, tenant: str) -> Iterator[Hostile]:
    """``n`` hostile events for ``tenant``, mutations drawn evenly."""
    names = SURE + MAYBE
    for i in range(n):
        mutation = names[i % len(names)] if i < len(names) else rng.choice(names)
        event = base_event(rng, tenant, f"fuzz-{rng.randrange(20)}")
        yield Hostile(mutation, MUTATIONS[mutation](rng, event), mutation in SURE)


@dataclass(frozen=True)
class HostileRequest:
    """One HTTP request: method, path (under the tenant), body bytes or query params."""

    mutation: str
    method: str
    path: str
    body: bytes | None = None
    params: tuple[tuple[str, str], ...] = ()


Params = tuple[tuple[str, str], ...]
COMMON_BAD_PARAMS: tuple[Params, ...] = (
    (("after", "e0-x"),), (("after", "z9-1"),), (("valid", "not a time"),),
    (("known", "2026-11-30T12:00:00"),), (("after", "e0-1" * 5000),), (("valid", "9" * 400),),
)


def _with(first: tuple[str, str], *more: Params) -> tuple[Params, ...]:
    """The common bad parameters next to a required good one, then ``more``."""
    return (*((first, *p) for p in COMMON_BAD_PARAMS), *more)


BAD_PARAMS: dict[str, tuple[Params, ...]] = {
    "records": (*COMMON_BAD_PARAMS, (("limit", "-1"),), (("limit", "x"),)),
    "facts": COMMON_BAD_PARAMS,
    "history": _with(("subject", "user:x"), ()),
    "search": _with(("text", "hello"), (("text", ""),), (("text", "x"), ("k", "-1")),
                    (("text", "x"), ("k", "10000000")), (("text", "x"), ("mode", "sql")), ()),
    "context": _with(("text", "hello"), (("text", "x"), ("budget_tokens", "0")), ()),
}
"""Per read route, query parameters it must refuse (unknown parameters are ignored, as
FastAPI does, so every one here is a known parameter with a bad value, or a missing one)."""


def hostile_requests(rng: random.Random, n: int, tenant: str,
                     other: str) -> Iterator[HostileRequest]:
    """``n`` HTTP requests that must all be answered 4xx: bodies of hostile events (only
    surely-bad mutations, or another tenant's event), broken envelopes, bad query params."""
    for i in range(n):
        pick = i % 5
        if pick <= 1:
            mutation = rng.choice(SURE)
            event = MUTATIONS[mutation](rng, base_event(rng, tenant, "fuzz-http"))
            body = b'{"events": [' + event + b"]}" if pick == 0 else event
            yield HostileRequest(mutation if pick == 0 else f"{mutation}-bare", "POST",
                                 "events", body)
        elif pick == 2:
            foreign = _dumps(base_event(rng, other, "fuzz-http"))
            yield HostileRequest("tenant_mismatch", "POST", "events",
                                 b'{"events": [' + foreign + b"]}")
        elif pick == 3:
            yield HostileRequest("bad_forget", "POST", "forget", rng.choice([
                b"{}", b'{"scope": {"type": "everything"}}', b'{"scope": "all"}',
                b'{"scope": {"type": "session"}}', b"\xff\xfe", _nest(2000),
                b'{"scope": {"type": "event", "event_id": "nope"}, "reason": 5}']))
        else:
            route = rng.choice(sorted(BAD_PARAMS))
            yield HostileRequest("bad_params", "GET", route, None, rng.choice(BAD_PARAMS[route]))
