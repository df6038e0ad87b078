"""Plain-text tables of query answers (the JSON the service sends), for the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TEXT_WIDTH = 60


def _cell(value: Any, width: int | None = None) -> str:
    text = "-" if value is None else str(value)
    text = text.replace("\n", " ")
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def _time(value: Any) -> str:
    """RFC 3339 shortened to seconds (``2024-02-01T00:00:00Z``)."""
    return "-" if value is None else str(value).split(".")[0].rstrip("Z") + "Z"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _header(data: dict[str, Any]) -> str:
    as_of = data.get("as_of") or {}
    known = as_of.get("known_offsets") or _time(as_of.get("known"))
    if isinstance(known, dict):
        known = ",".join(f"{p}:{o}" for p, o in known.items())
    return f"as of valid={_time(as_of.get('valid'))} known={known}\n"


def _facts(rows: list[dict[str, Any]]) -> str:
    return table(
        ["subject", "relation", "object", "valid_from", "valid_to", "known_from", "known_to",
         "source_event"],
        [[_cell(r["subject"]), _cell(r["relation"]), _cell(r["object"], 40),
          _time(r["vt_from"]), _time(r["vt_to"]), _time(r["tt_from"]), _time(r["tt_to"]),
          _cell(r["source_event_id"])] for r in rows])


def _hits(rows: list[dict[str, Any]]) -> str:
    out = []
    for h in rows:
        m, s = h["memory"], h["score"]
        out.append([str(h["rank"]), f"{s['fused']:.4f}", _cell(s["bm25_rank"]),
                    _cell(s["vector_rank"]), _cell(m["kind"]), _cell(m["session"]),
                    _time(m["vt_from"]), _cell(m["event_id"]), _cell(m["text"], TEXT_WIDTH)])
    return table(["rank", "fused", "bm25", "vector", "kind", "session", "valid_from",
                  "event_id", "text"], out)


def _records(rows: list[dict[str, Any]]) -> str:
    return table(
        ["known_at", "position", "session", "kind", "occurred_at", "event_id", "text"],
        [[_time(r["tt"]), f"{r['partition']}:{r['offset']}", _cell(r["session"]),
          _cell(r["kind"]), _time(r["occurred_at"]), _cell(r["event_id"]),
          _cell(r["text"], TEXT_WIDTH)] for r in rows])


def _context(data: dict[str, Any]) -> str:
    items = table(["source", "tokens", "event_id", "text"],
                  [[_cell(i["source"]), str(i["tokens"]), _cell(i["event_id"]),
                    _cell(i["text"], TEXT_WIDTH)] for i in data["items"]])
    return (f"{data['text']}\n\n{items}tokens {data['used_tokens']} of {data['budget_tokens']}, "
            f"{data['dropped']} candidates left out\n")


def render(op: str, data: dict[str, Any]) -> str:
    """The answer of ``op`` as a table (with an as-of header line)."""
    if op == "facts":
        body = _facts(data["facts"])
    elif op == "history":
        body = _facts(data["versions"])
    elif op == "search":
        body = _hits(data["hits"])
    elif op == "records":
        body = _records(data["records"])
    else:
        body = _context(data)
    return _header(data) + body
