"""GenAI signals -> memstack events, each turn once: the history every model call repeats is
recognised and dropped.

A model call's span carries the whole conversation so far (``gen_ai.input.messages``) and the
answer (``gen_ai.output.messages``). :class:`TurnLog` keeps, per session, a content hash of
every turn already emitted; a call's messages are walked in order and only the unseen ones
become events. Identical turns in one conversation ("yes", twice) stay apart: the key is
``(role, content, n)`` where ``n`` counts the same content earlier in that call's list. Tool
calls and results are keyed by their call id, so an ``execute_tool`` span and the tool parts
of the model calls around it give one ``tool_call`` and one ``tool_result``.

Times: a new input turn occurred at the start of the first call that carried it, an output
turn at that call's end; a tool run's call at its start, its result at its end. Event ids are
UUIDv7 built from that time and a hash of ``(tenant, session, key)``, so ingesting the same
records again produces the same ids (the stores keep one copy per id).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.pipelines.otel.otlp import (
    ModelCall,
    Signal,
    ToolRun,
    arguments_of,
    as_text,
    parts_of,
)
from memstack.schemas.events import Event

SOURCE = "otel"
MAX_SESSIONS = 100_000
ROLES = {"user": ("user", "user"), "assistant": ("assistant", "agent")}
"""GenAI role -> (memstack message role, provenance authority). System instructions repeat
configuration, not memory; they are not ingested."""


def event_id(tenant: str, session: str, key: str, at: datetime) -> str:
    """A UUIDv7 from the turn's time and a hash of what it is (stable across re-ingests)."""
    digest = hashlib.sha256(f"{tenant}\x1f{session}\x1f{key}".encode()).digest()
    rand = int.from_bytes(digest[:10], "big")
    value = (int(at.timestamp() * 1000) & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= (rand >> 68) << 64  # 12 bits
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


@dataclass(frozen=True)
class Turn:
    """One new turn, tool call or tool result, before it is an event."""

    key: str
    at: datetime
    kind: str
    fields: Mapping[str, Any]


@dataclass
class _Seen:
    keys: set[str]
    tools: dict[str, str]
    """call id -> tool name, for results that name only the call."""


class TurnLog:
    """Per session, the keys of the turns already emitted (the most recent sessions kept)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._sessions: OrderedDict[tuple[str, str], _Seen] = OrderedDict()
        self._max = max_sessions
        self.repeated = 0
        """Turns recognised as already emitted (the repeated history)."""

    def _session(self, tenant: str, session: str) -> _Seen:
        key = (tenant, session)
        seen = self._sessions.get(key)
        if seen is None:
            seen = self._sessions[key] = _Seen(set(), {})
            while len(self._sessions) > self._max:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(key)
        return seen

    def events(self, signal: Signal, tenant: str) -> list[Event]:
        """The events of the turns of ``signal`` not emitted before, in order."""
        session = signal.origin.session
        state = self._session(tenant, session)
        seen = state.keys
        turns = (self._call_turns(signal, state.tools) if isinstance(signal, ModelCall)
                 else self._tool_turns(signal, state.tools))
        builder = EventBuilder(Defaults(tenant=tenant, agent=signal.origin.agent or SOURCE,
                                        source=SOURCE))
        out: list[Event] = []
        for turn in turns:
            if turn.key in seen:
                self.repeated += 1
                continue
            seen.add(turn.key)
            out.append(self._event(builder, tenant, session, turn))
        return out

    def _event(self, builder: EventBuilder, tenant: str, session: str, turn: Turn) -> Event:
        env = {"event_id": event_id(tenant, session, turn.key, turn.at),
               "occurred_at": turn.at}
        f = turn.fields
        if turn.kind == "message":
            return builder.message(session, f["role"], f["text"], authority=f["authority"],
                                   **env)
        if turn.kind == "tool_call":
            return builder.tool_call(session, f["tool"], f["call_id"], dict(f["arguments"]),
                                     authority="agent", **env)
        return builder.tool_result(session, f["tool"], f["call_id"], f["output"],
                                   is_error=f["is_error"], authority="tool", **env)

    def _call_turns(self, call: ModelCall, tools: dict[str, str]) -> list[Turn]:
        turns: list[Turn] = []
        counts: Counter[str] = Counter()
        for messages, at in ((call.inputs, call.start), (call.outputs, call.end)):
            for message in messages:
                turns.extend(_message_turns(message, at, counts, tools))
        return turns

    def _tool_turns(self, run: ToolRun, tools: dict[str, str]) -> list[Turn]:
        tools[run.call_id] = run.tool
        turns = [Turn(f"tool_call:{run.call_id}", run.start, "tool_call", {
            "tool": run.tool, "call_id": run.call_id, "arguments": run.arguments})]
        if run.result is not None or run.is_error:
            turns.append(Turn(f"tool_result:{run.call_id}", run.end, "tool_result", {
                "tool": run.tool, "call_id": run.call_id, "output": run.result or "",
                "is_error": run.is_error}))
        return turns


def _message_turns(message: Mapping[str, Any], at: datetime, counts: Counter[str],
                   tools: dict[str, str]) -> Iterable[Turn]:
    role = str(message.get("role"))
    texts: list[str] = []
    for part in parts_of(message):
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("content"), str):
            texts.append(part["content"])
        elif kind == "tool_call" and part.get("id") and part.get("name"):
            call_id, tool = str(part["id"]), str(part["name"])
            tools[call_id] = tool
            yield Turn(f"tool_call:{call_id}", at, "tool_call", {
                "tool": tool, "call_id": call_id,
                "arguments": arguments_of(part.get("arguments"))})
        elif kind == "tool_call_response" and part.get("id"):
            call_id = str(part["id"])
            yield Turn(f"tool_result:{call_id}", at, "tool_result", {
                "tool": tools.get(call_id, "unknown"),
                "call_id": call_id, "output": as_text(part.get("response")),
                "is_error": False})
    if texts and role in ROLES:
        text = "\n".join(texts)
        digest = hashlib.sha256(json.dumps([role, text]).encode()).hexdigest()[:32]
        counts[digest] += 1
        memstack_role, authority = ROLES[role]
        yield Turn(f"message:{digest}:{counts[digest]}", at, "message",
                   {"role": memstack_role, "text": text, "authority": authority})
