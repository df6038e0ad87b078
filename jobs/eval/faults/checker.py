"""The checker of a fault-injection history: pure logic over a history and a store snapshot.

Rules (each broken one is a counted figure and a line in ``problems``):

- **lost**: an event the broker acknowledged (the HTTP write answered 200) and not forgotten is
  not in its store: ``records`` for messages and tool calls, ``fact_entries`` for facts (a
  doomed write whose forget was sent and never answered may be forgotten: not counted);
- **duplicated**: an acknowledged event held more than once by any store (records, fact
  entries, LanceDB memories); ``log_duplicates`` counts events the log holds twice (a retry
  the writer produced again; the stores must still hold them once);
- **forgotten_readable**: a forgotten event or its marker text still in a store, a raw file or
  a read answered after the forget's position, the first time it is checked;
  **resurrected**: the same found in a later check (after restarts, replays, rebuilds) of a
  forget that had checked clean before;
- **cross_tenant_reads**: a read answered rows of another tenant;
- **stale_after_reads**: a read with ``after=`` a write's position missed that write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from memstack.jobs.eval.faults.history import History
from memstack.pipelines.service.position import Position

FACT_KINDS = frozenset({"fact_asserted", "fact_retracted"})


def token_tenant(token: str) -> str | None:
    """The tenant a marker token was written for: ``mk_<tenant>_<serial>_q``."""
    parts = token.split("_")
    return parts[1] if len(parts) == 4 and parts[0] == "mk" and parts[3] == "q" else None


@dataclass(frozen=True)
class StoreSnapshot:
    """What the stores (and the log) hold after a history, read with the service stopped."""

    records: Mapping[str, int]
    """event id -> rows in DuckDB ``records``."""
    facts: Mapping[str, int]
    """event id -> rows in DuckDB ``fact_entries``."""
    memories: Mapping[str, int]
    """event id -> rows in LanceDB ``memories``."""
    log_copies: Mapping[str, int]
    """event id -> records in the events topic carrying it."""
    found_tokens: frozenset[str]
    """Forgotten marker tokens found in any store's rows or raw files (the audit)."""


@dataclass
class Verdict:
    lost: int = 0
    duplicated: int = 0
    log_duplicates: int = 0
    forgotten_readable: int = 0
    resurrected: int = 0
    cross_tenant_reads: int = 0
    stale_after_reads: int = 0
    problems: list[str] = field(default_factory=list)
    readable_ids: set[str] = field(default_factory=set)
    """Request ids of forgets whose content was found (readable or resurrected)."""

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.forgotten_readable or self.resurrected
                    or self.cross_tenant_reads or self.stale_after_reads)

    def figures(self) -> dict[str, float]:
        return {"lost": self.lost, "duplicated": self.duplicated,
                "log_duplicates": self.log_duplicates,
                "forgotten_readable": self.forgotten_readable, "resurrected": self.resurrected,
                "cross_tenant_reads": self.cross_tenant_reads,
                "stale_after_reads": self.stale_after_reads}

    def note(self, line: str) -> None:
        if len(self.problems) < 50:  # enough to see the pattern; the counts say the rest
            self.problems.append(line)


def check(history: History, snapshot: StoreSnapshot,
          audited_before: Iterable[str] = ()) -> Verdict:
    """Check ``history`` against ``snapshot``. ``audited_before``: request ids of forgets that
    checked clean in an earlier check (content found again now is resurrected)."""
    verdict = Verdict()
    forgotten = _forgotten_ids(history)
    _check_acked(history, snapshot, forgotten, verdict)
    _check_forgets(history, snapshot, set(audited_before), verdict)
    _check_reads(history, verdict)
    return verdict


def _forgotten_ids(history: History) -> set[str]:
    """Events a forget covers, or may cover (a forget sent and never answered)."""
    return ({event_id for f in history.forgets for event_id in f.event_ids}
            | {event_id for w in history.unsure_forgets for event_id in w.event_ids})


def _check_acked(history: History, snapshot: StoreSnapshot, forgotten: set[str],
                 verdict: Verdict) -> None:
    for write in history.writes:
        for event_id, kind in zip(write.event_ids, write.kinds, strict=True):
            if snapshot.log_copies.get(event_id, 0) > 1:
                verdict.log_duplicates += 1
            if event_id in forgotten:
                continue
            store = snapshot.facts if kind in FACT_KINDS else snapshot.records
            held = store.get(event_id, 0)
            if held == 0:
                verdict.lost += 1
                verdict.note(f"lost: {kind} {event_id} of {write.tenant}/{write.session} "
                             f"(acknowledged at {write.position})")
            copies = max(held, snapshot.memories.get(event_id, 0))
            if copies > 1:
                verdict.duplicated += 1
                verdict.note(f"duplicated: {kind} {event_id} held {copies} times")


def _check_forgets(history: History, snapshot: StoreSnapshot, audited: set[str],
                   verdict: Verdict) -> None:
    for forget in history.forgets:
        left = [e for e in forget.event_ids if snapshot.records.get(e, 0)
                or snapshot.facts.get(e, 0) or snapshot.memories.get(e, 0)]
        found = [t for t in forget.tokens if t in snapshot.found_tokens]
        if not left and not found:
            continue
        what = f"forget {forget.request_id} ({forget.tenant}/{forget.session}): " \
               f"{len(left)} event(s) still stored, {len(found)} marker(s) found"
        verdict.readable_ids.add(forget.request_id)
        if forget.request_id in audited:
            verdict.resurrected += 1
            verdict.note("resurrected: " + what)
        else:
            verdict.forgotten_readable += 1
            verdict.note("readable after forget: " + what)


def _check_reads(history: History, verdict: Verdict) -> None:
    gone = {t: f for f in history.forgets for t in f.tokens}
    for read in history.reads:
        foreign = {t for t in read.seen_tenants if t != read.tenant}
        foreign |= {t for t in map(token_tenant, read.seen_tokens) if t and t != read.tenant}
        if foreign:
            verdict.cross_tenant_reads += 1
            verdict.note(f"cross-tenant read: {read.tenant} {read.route} saw {sorted(foreign)}")
        missing = set(read.expected) - set(read.seen_ids)
        if missing:
            verdict.stale_after_reads += 1
            verdict.note(f"stale read: {read.tenant} {read.route} after={read.after} missed "
                         f"{sorted(missing)}")
        for token in read.seen_tokens:
            forget = gone.get(token)
            if forget is not None and _covers(read.after, forget.position):
                verdict.forgotten_readable += 1
                verdict.readable_ids.add(forget.request_id)
                verdict.note(f"read after forget {forget.request_id} returned {token}")


def _covers(after: str, position: str) -> bool:
    """Whether the token ``after`` covers ``position`` on every partition it names."""
    return Position.parse(after).covers(Position.parse(position))
