"""The MCP tools of memstack, over a :class:`~memstack.mcp.backend.MemoryBackend`.

Writes: ``record`` (a message, observation or note), ``assert_fact``, ``retract_fact``,
``forget``. Reads: ``search``, ``facts``, ``history``, ``records``, ``context``, with the
parameters of :mod:`memstack.view.reads` (and ``after``). Every tool answers JSON;
a write's ``position`` passed as ``after`` makes a read wait until the write is in it. Times
are RFC 3339 (``2024-05-01T12:00:00Z``) or dates (``2024-05-01``); ``current`` means now.
A failed call answers an error result whose text says what to change.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime
from typing import Any, Literal, ParamSpec

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import TypeAdapter, ValidationError

from memstack.foundation.errors import MemstackError
from memstack.mcp.backend import BackendResolver, MemoryBackend
from memstack.service.types import ServiceError, WriteReceipt, problem_text

P = ParamSpec("P")
Json = dict[str, Any]
RecordKind = Literal["message", "observation", "note"]
Role = Literal["user", "assistant", "system"]
ScopeType = Literal["event", "session", "subject", "tenant", "fact"]
Mode = Literal["hybrid", "bm25", "vector"]
CURRENT = ("current", "now", "")

INSTRUCTIONS = (
    "Long-term memory of this agent. Record what happens with `record`, state facts with "
    "`assert_fact` (they supersede older values of single-valued relations), ask with `facts`, "
    "`search`, `history` or `context`. Times are RFC 3339 or dates; `facts` answers as of now "
    "unless `valid` says otherwise. Pass a write's `position` as `after` to read your write.")


def event_time(text: str | None, name: str) -> datetime | None:
    """An event time argument: RFC 3339 with a zone or a date (midnight UTC); empty -> None."""
    if text is None or text.strip().lower() in CURRENT:
        return None
    raw = text.strip()
    try:
        if len(raw) == 10:
            return datetime.combine(date.fromisoformat(raw), datetime.min.time(), UTC)
        value = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise ToolError(f"{name}={text!r} is not a time; use RFC 3339 like "
                        "2024-05-01T12:00:00Z or a date like 2024-05-01") from exc
    if value.tzinfo is None:
        raise ToolError(f"{name}={text!r} has no zone; add Z or +01:00")
    return value.astimezone(UTC)


def as_of(text: str | None) -> str | None:
    """A query time: ``current``/``now``/empty -> the service's default (now)."""
    return None if text is None or text.strip().lower() in CURRENT else text.strip()


def to_json(answer: object) -> Json:
    data: Json = TypeAdapter(type(answer)).dump_python(answer, mode="json")
    return data


def receipt(written: WriteReceipt) -> Json:
    return {"event_ids": written.event_ids, "position": written.position}


def explained(fn: Callable[P, Awaitable[Json]]) -> Callable[P, Awaitable[Json]]:
    """Turn memstack's errors into tool errors whose text reaches the client as is."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> Json:
        try:
            return await fn(*args, **kwargs)
        except ServiceError as exc:  # the service's problem: its title, detail and status
            raise ToolError(problem_text(exc.status, exc.detail)) from exc
        except (MemstackError, ValidationError, ValueError) as exc:
            raise ToolError(str(exc)) from exc

    return call


def build_server(resolve: BackendResolver, *, name: str = "memstack") -> MCPServer:
    """The MCP server; ``resolve`` finds each call's backend from its HTTP headers."""
    server: MCPServer = MCPServer(name, instructions=INSTRUCTIONS, log_level="WARNING")

    def memory(ctx: Context) -> MemoryBackend:
        return resolve(ctx.headers)

    _write_tools(server, memory)
    _forget_tool(server, memory)
    _read_tools(server, memory)
    return server


def _write_tools(server: MCPServer, memory: Callable[[Context], MemoryBackend]) -> None:
    @server.tool()
    @explained
    async def record(kind: RecordKind, session: str, text: str, ctx: Context,
                     role: Role = "user", subject: str | None = None,
                     occurred_at: str | None = None) -> Json:
        """Record a message (with its role), an observation or a note in a session."""
        env: Json = {"subject": subject, "occurred_at": event_time(occurred_at, "occurred_at")}
        env = {k: v for k, v in env.items() if v is not None}
        backend = memory(ctx)
        if kind == "message":
            return receipt(await backend.message(session, role, text, **env))
        if kind == "observation":
            return receipt(await backend.observation(session, text, **env))
        return receipt(await backend.note(session, text, **env))

    @server.tool()
    @explained
    async def assert_fact(subject: str, relation: str, object: str, ctx: Context,
                          session: str = "mcp", valid_from: str | None = None,
                          valid_to: str | None = None) -> Json:
        """State that (subject, relation, object) holds from ``valid_from`` (default: now)."""
        return receipt(await memory(ctx).fact(
            session, subject, relation, object, event_time(valid_from, "valid_from"),
            event_time(valid_to, "valid_to")))

    @server.tool()
    @explained
    async def retract_fact(subject: str, relation: str, ctx: Context,
                           object: str | None = None, session: str = "mcp",
                           valid_from: str | None = None) -> Json:
        """End a fact's validity from ``valid_from`` (default: now); ``object`` for one value."""
        return receipt(await memory(ctx).retract(
            session, subject, relation, object, event_time(valid_from, "valid_from")))


def _forget_tool(server: MCPServer, memory: Callable[[Context], MemoryBackend]) -> None:
    @server.tool()
    @explained
    async def forget(scope: ScopeType, ctx: Context, reason: str | None = None,
                     event_id: str | None = None, session: str | None = None,
                     subject: str | None = None, relation: str | None = None,
                     object: str | None = None) -> Json:
        """Forget an event, a session, a subject, the tenant, or a fact pattern, everywhere."""
        fields = {"type": scope, "event_id": event_id, "session": session, "subject": subject,
                  "relation": relation, "object": object}
        answer = await memory(ctx).forget({k: v for k, v in fields.items() if v is not None},
                                          reason)
        return answer.model_dump(mode="json")


def _read_tools(server: MCPServer, memory: Callable[[Context], MemoryBackend]) -> None:
    @server.tool()
    @explained
    async def facts(ctx: Context, subject: str | None = None, relation: str | None = None,
                    valid: str = "current", known: str | None = None,
                    after: str | None = None) -> Json:
        """Fact values valid at ``valid`` (default: current) as known at ``known`` (now)."""
        return to_json(await memory(ctx).facts(subject, relation, valid=as_of(valid),
                                               known=as_of(known), after=after))

    @server.tool()
    @explained
    async def history(subject: str, ctx: Context, relation: str | None = None,
                      valid: str | None = None, known: str | None = None,
                      after: str | None = None) -> Json:
        """Every version of a subject's facts: valid interval and when memory knew it."""
        return to_json(await memory(ctx).history(subject, relation, valid=as_of(valid),
                                                 known=as_of(known), after=after))

    @server.tool()
    @explained
    async def search(text: str, ctx: Context, k: int = 10, kinds: list[str] | None = None,
                     session: str | None = None, subject: str | None = None,
                     mode: Mode = "hybrid", filter: Json | None = None,
                     valid: str | None = None, known: str | None = None,
                     after: str | None = None) -> Json:
        """Search what was recorded (BM25 + vector), with the event each hit came from;
        ``kinds`` keeps only rows of those kinds (message, tool_call, tool_result, ...);
        ``filter`` only rows whose metadata passes it: {"topic": "x"}, {"score": {"gte": 3}},
        {"tags": {"contains": "a"}}, {"lang": {"in": [...]}}, ne, nin, gt, lt, lte; and/or/not."""
        return to_json(await memory(ctx).search(
            text, k, kinds=kinds or (), session=session, subject=subject, mode=mode,
            filter=filter, valid=as_of(valid), known=as_of(known), after=after))

    @server.tool()
    @explained
    async def records(ctx: Context, session: str | None = None, start: str | None = None,
                      end: str | None = None, limit: int | None = None,
                      filter: Json | None = None, valid: str | None = None,
                      known: str | None = None, after: str | None = None) -> Json:
        """Raw records in log order, occurred in [``start``, ``end``), at most ``limit``,
        whose metadata passes ``filter`` (as search's)."""
        return to_json(await memory(ctx).records(
            session, start=event_time(start, "start"), end=event_time(end, "end"),
            limit=limit, filter=filter, valid=as_of(valid), known=as_of(known), after=after))

    @server.tool()
    @explained
    async def context(text: str, ctx: Context, budget_tokens: int = 2000,
                      session: str | None = None, subject: str | None = None,
                      filter: Json | None = None, valid: str | None = None,
                      known: str | None = None, after: str | None = None) -> Json:
        """A prompt-ready context for ``text`` under a token budget, with provenance; search
        hits and recent turns only of rows whose metadata passes ``filter``."""
        return to_json(await memory(ctx).context(
            text, budget_tokens, session=session, subject=subject, filter=filter,
            valid=as_of(valid), known=as_of(known), after=after))
