"""Context assembly: the context window of the memory stack, under a token budget.

A context is built from :class:`ContextSource` s, each contributing ranked
:class:`ContextItem` s with provenance. The defaults are ``facts`` (current facts about the
subjects in play), ``relevant`` (hybrid search hits) and ``recent`` (the session's last turns).
Other stores plug in by adding a source: ``default_sources(extra=[MySource()])``. A
:class:`memstack.view.MemoryView` given a session-state reader (``state=``) or a recall reader
(``recall=``) adds their read-outs (``state``, ``recall``) this way by default.

Budget: each source first gets its ``share`` of the budget (items in its own order, an item is
taken only when it fits whole); what is left is then filled in source order. Items seen by an
earlier source (same event id) are not repeated.

Token estimate: ``ceil(len(text) / 4)`` (+1 for the line break), the usual ~4 characters per
token of English text under BPE tokenizers (GPT-style, ~3.5 to 4.5). It is deterministic and
needs no tokenizer; give a smaller budget when the prompt's model tokenizes more densely.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import TYPE_CHECKING, Protocol

from memstack.schemas.events import format_time
from memstack.view.errors import InvalidQueryError
from memstack.view.types import Context, ContextItem

if TYPE_CHECKING:
    from memstack.schemas.filters import Filter
    from memstack.view.memory_view import AsOfView

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Tokens of one context line: ``ceil(len / 4)`` plus one for its line break."""
    return math.ceil(len(text) / CHARS_PER_TOKEN) + 1


@dataclass(frozen=True)
class ContextRequest:
    query: str
    budget_tokens: int
    session: str | None = None
    subject: str | None = None
    filter: Filter | None = None
    """A metadata filter on the rows the ``relevant`` and ``recent`` sources read (facts carry
    no metadata: the ``facts`` source reads the subjects of the filtered hits)."""


class ContextSource(Protocol):
    """A producer of context items. ``share`` is its first-pass fraction of the budget."""

    @property
    def name(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def share(self) -> float: ...

    def gather(self, view: AsOfView, request: ContextRequest) -> Sequence[ContextItem]:
        """Candidate items, best first; each carries its provenance."""
        ...


@dataclass(frozen=True)
class RelevantRecords:
    """Hybrid search hits for the query: those of the request's session and those of all the
    tenant's sessions, taken in turn (a session hit, a tenant hit, ...; each once), so that
    neither the conversation at hand nor what memory holds from others crowds the other out.
    Without a session, the tenant's hits alone. ``k`` hits of each are ranked; packing keeps
    as many, best first, as the budget holds."""

    k: int = 50
    """Hits ranked per list. More than a 2,000-token budget holds (~45 turns): a search
    ranking more rows ranks its first ones better (more candidates per leg, more neighbours
    read); on LoCoMo 50 kept the evidence of more questions than 30 (docs/queries.md)."""
    name: str = "relevant"
    title: str = "Relevant memories"
    share: float = 0.5

    def gather(self, view: AsOfView, request: ContextRequest) -> Sequence[ContextItem]:
        everywhere = view.search(request.query, self.k, filter=request.filter)
        here = ([] if request.session is None
                else view.search(request.query, self.k, session=request.session,
                                 filter=request.filter))
        hits = [h for pair in zip_longest(here, everywhere) for h in pair if h is not None]
        seen: set[str] = set()
        out = []
        for h in hits:
            if h.memory.event_id not in seen:
                seen.add(h.memory.event_id)
                out.append(_item(self.name,
                                 f"[{format_time(h.memory.vt_from)[:16]}] {h.memory.text}",
                                 h.memory.event_id, h.memory.session, h.memory, h.score.fused))
        return out


@dataclass(frozen=True)
class CurrentFacts:
    """Facts valid now (as of the view) about the request's subject and the hits' subjects."""

    name: str = "facts"
    title: str = "Current facts"
    share: float = 0.2
    max_subjects: int = 10

    def gather(self, view: AsOfView, request: ContextRequest) -> Sequence[ContextItem]:
        subjects: list[str] = [request.subject] if request.subject else []
        for hit in view.search(request.query, RelevantRecords.k, filter=request.filter):
            if hit.memory.subject and hit.memory.subject not in subjects:
                subjects.append(hit.memory.subject)
        items: list[ContextItem] = []
        for subject in subjects[: self.max_subjects]:
            for f in view.facts(subject):
                since = format_time(f.vt_from)[:10]
                items.append(ContextItem(
                    self.name, f"{f.subject} {f.relation} {f.object} (since {since})",
                    0, f.source_event_id, None, f.vt_from, f.tt_from))
        return items


@dataclass(frozen=True)
class RecentTurns:
    """The last turns of the request's session, oldest first."""

    turns: int = 10
    name: str = "recent"
    title: str = "Recent turns"
    share: float = 0.3

    def gather(self, view: AsOfView, request: ContextRequest) -> Sequence[ContextItem]:
        if request.session is None:
            return []
        rows = [r for r in view.records(request.session, filter=request.filter)
                if r.text][-self.turns:]
        # newest first, so a tight budget keeps the latest turns; shown oldest first
        return [_item(self.name, f"[{r.kind}] {r.text}", r.event_id, r.session, r, None)
                for r in reversed(rows)]


def _item(source: str, text: str, event_id: str, session: str, row: object,
          score: float | None) -> ContextItem:
    occurred = getattr(row, "vt_from", None)
    known = getattr(row, "tt_from", None) or getattr(row, "tt", None)
    return ContextItem(source, text, 0, event_id, session, occurred, known, score)


def default_sources(extra: Sequence[ContextSource] = ()) -> list[ContextSource]:
    """``facts``, ``relevant``, ``recent``, then ``extra`` (the read-outs of the session state
    and the consolidated weights, when they run). Each extra keeps its own share; the three
    defaults shrink in proportion to leave it room (docs/session-state.md measures the effect)."""
    room = max(0.0, 1.0 - sum(s.share for s in extra))
    return [CurrentFacts(share=0.2 * room), RelevantRecords(share=0.5 * room),
            RecentTurns(share=0.3 * room), *extra]


def assemble(view: AsOfView, request: ContextRequest,
             sources: Sequence[ContextSource]) -> Context:
    """Pick items per source share, then fill what is left; render sections in source order."""
    if request.budget_tokens < 1:
        raise InvalidQueryError(f"budget_tokens={request.budget_tokens} must be at least 1")
    candidates = [[_sized(i) for i in s.gather(view, request)] for s in sources]
    packer = _Packer(request.budget_tokens, [estimate_tokens(f"## {s.title}") for s in sources],
                     len(sources))
    for index, source in enumerate(sources):
        packer.fill(index, candidates[index], int(source.share * request.budget_tokens))
    for index in range(len(sources)):
        packer.fill(index, candidates[index], request.budget_tokens)
    return _render(view, request, sources, packer.chosen, candidates, packer.used)


class _Packer:
    """Greedy packing under a global budget and a per-source cap (headers count too)."""

    def __init__(self, budget: int, headers: list[int], n: int) -> None:
        self.budget = budget
        self.headers = headers
        self.chosen: list[list[ContextItem]] = [[] for _ in range(n)]
        self.taken = [0] * n
        self.used = 0
        self._seen: set[str] = set()

    def fill(self, index: int, items: Sequence[ContextItem], cap: int) -> None:
        for item in items:
            key = item.text if item.source == "facts" or not item.event_id else item.event_id
            if key in self._seen:
                continue
            cost = item.tokens + (0 if self.chosen[index] else self.headers[index])
            if self.taken[index] + cost > cap or self.used + cost > self.budget:
                continue
            self.chosen[index].append(item)
            self.taken[index] += cost
            self.used += cost
            self._seen.add(key)


def _sized(item: ContextItem) -> ContextItem:
    return ContextItem(item.source, item.text, estimate_tokens(item.text), item.event_id,
                       item.session, item.occurred_at, item.known_at, item.score)


def _render(view: AsOfView, request: ContextRequest, sources: Sequence[ContextSource],
            chosen: list[list[ContextItem]], candidates: list[list[ContextItem]],
            used: int) -> Context:
    lines: list[str] = []
    items: list[ContextItem] = []
    for source, picked, cands in zip(sources, chosen, candidates, strict=True):
        if not picked:
            continue
        picked = sorted(picked, key=cands.index)  # the source's own order
        if source.name == "recent":
            picked.reverse()
        lines.append(f"## {source.title}")
        lines += [i.text for i in picked]
        items += picked
    dropped = sum(len(c) for c in candidates) - len(items)
    return Context("\n".join(lines), tuple(items), request.budget_tokens, used, dropped,
                   view.as_of.describe(), tuple(s.name for s in sources))
