"""The bitemporal timeline of one fact key: entries in, versions out (pure functions).

A key is ``(tenant, subject, relation)``. Its entries are replayed in transaction-time order;
each entry is an update "for portion of valid time ``[vt_from, end)``" where ``end`` is the
entry's explicit ``vt_to``, else the smallest ``vt_from`` of an entry already applied (earlier
tt) on the same timeline that is greater than this entry's ``vt_from``, else open. An assert
sets the value on that portion, cutting the segments it overlaps; a retract clears it. After each
entry the timeline is a set of segments; a segment that exists from entry i until entry j is one
version with ``tt_from = tt_i`` and ``tt_to = tt_j``. See docs/semantics.md.

Single-valued relation: one timeline (``None``), holding at most one object at any valid time.
Multi-valued: one presence timeline per object; a retraction without an object applies to every
object, and its ``vt_from`` bounds later entries of every object.

:class:`Timelines` is the replay position of a key: its current versions per timeline (sorted by
``vt_from``) and the sorted valid-time starts of the entries applied so far, so applying an entry
costs a binary search and a copy, not a scan of the key's history.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from memstack.operators.log import LogPosition
from memstack.operators.mutations import (
    DeleteFactVersion,
    FactEntry,
    FactVersion,
    Mutation,
    PutFactVersion,
    version_id_for,
)

OPEN: datetime = datetime.max.replace(tzinfo=UTC)
"""Internal stand-in for an unbounded valid-time end (``None`` in rows)."""

Timeline = str | None
"""None for a single-valued relation (and, in a multi-valued one, the retract-all starts)."""


@dataclass(frozen=True, order=True)
class FactKey:
    """The unit of fact state: all entries and versions of one (tenant, subject, relation)."""

    tenant: str
    subject: str
    relation: str

    @classmethod
    def of(cls, entry: FactEntry) -> FactKey:
        return cls(entry.tenant, entry.subject, entry.relation)


@dataclass(frozen=True, order=True)
class Segment:
    """A valid-time interval holding ``object``, asserted by ``source_event_id``."""

    object: str
    vt_from: datetime
    vt_to: datetime  # OPEN when unbounded
    source_event_id: str

    @classmethod
    def of(cls, version: FactVersion) -> Segment:
        return cls(version.object, version.vt_from, _vt_to(version), version.source_event_id)


def new_version(key: FactKey, segment: Segment, tt: LogPosition) -> FactVersion:
    """The version of ``segment`` that becomes current at transaction time ``tt``."""
    vt_to = None if segment.vt_to == OPEN else segment.vt_to
    return FactVersion(
        version_id=version_id_for(
            tenant=key.tenant, subject=key.subject, relation=key.relation,
            object=segment.object, vt_from=segment.vt_from, vt_to=vt_to, tt_from=tt,
            source_event_id=segment.source_event_id,
        ),
        tenant=key.tenant, subject=key.subject, relation=key.relation, object=segment.object,
        vt_from=segment.vt_from, vt_to=vt_to,
        tt_from=tt.log_time, tt_from_partition=tt.partition, tt_from_offset=tt.offset,
        tt_to=None, tt_to_partition=None, tt_to_offset=None,
        source_event_id=segment.source_event_id, closed_by_event_id=None,
    )


def diff(old: Iterable[FactVersion], new: Iterable[FactVersion]) -> list[Mutation]:
    """Mutations that turn the rows ``old`` into ``new``: deletes first, then upserts."""
    before = {v.version_id: v for v in old}
    after = {v.version_id: v for v in new}
    out: list[Mutation] = [DeleteFactVersion(vid) for vid in sorted(before.keys() - after.keys())]
    out.extend(PutFactVersion(after[vid]) for vid in sorted(after) if before.get(vid) != after[vid])
    return out


def _vt_from(version: FactVersion) -> datetime:
    return version.vt_from


def _vt_to(version: FactVersion) -> datetime:
    return OPEN if version.vt_to is None else version.vt_to


@dataclass(frozen=True)
class Timelines:
    """Current versions per timeline (each sorted by vt_from) and applied starts per timeline."""

    multi: bool
    current: Mapping[Timeline, tuple[FactVersion, ...]] = field(default_factory=dict)
    starts: Mapping[Timeline, tuple[datetime, ...]] = field(default_factory=dict)

    @classmethod
    def at(
        cls, multi: bool, current: Iterable[FactVersion], applied: Iterable[FactEntry]
    ) -> Timelines:
        """The replay position given its current versions and the entries applied so far."""
        by_line: dict[Timeline, list[FactVersion]] = {}
        for version in current:
            by_line.setdefault(version.object if multi else None, []).append(version)
        starts: dict[Timeline, list[datetime]] = {}
        for entry in applied:
            starts.setdefault(entry.object if multi else None, []).append(entry.vt_from)
        return cls(
            multi,
            {k: tuple(sorted(v, key=_vt_from)) for k, v in by_line.items()},
            {k: tuple(sorted(v)) for k, v in starts.items()},
        )

    def versions(self) -> tuple[FactVersion, ...]:
        return tuple(v for line in sorted(self.current, key=str) for v in self.current[line])

    def replay(
        self, key: FactKey, entries: Sequence[FactEntry]
    ) -> tuple[Timelines, list[FactVersion], list[FactVersion]]:
        """Apply entries (in order); return (new position, versions closed, versions created)."""
        current = dict(self.current)
        starts = {k: list(v) for k, v in self.starts.items()}
        closed: list[FactVersion] = []
        created: list[FactVersion] = []
        for entry in entries:
            for line in self._lines(entry, current):
                end = self._end(entry, line, starts)
                before = current.get(line, ())
                after, gone, new = _apply(key, before, entry, end, self.multi)
                closed.extend(v.closed(entry.tt, entry.event_id) for v in gone)
                created.extend(new)
                if after:
                    current[line] = after
                else:
                    current.pop(line, None)
            insort(starts.setdefault(entry.object if self.multi else None, []), entry.vt_from)
        frozen = {k: tuple(v) for k, v in starts.items()}
        return Timelines(self.multi, current, frozen), closed, created

    def _lines(
        self, entry: FactEntry, current: Mapping[Timeline, object]
    ) -> Sequence[Timeline]:
        if not self.multi:
            return [None]
        if entry.object is not None:
            return [entry.object]
        return sorted(line for line in current if line is not None)

    def _end(
        self, entry: FactEntry, line: Timeline, starts: Mapping[Timeline, list[datetime]]
    ) -> datetime:
        if entry.vt_to is not None:
            return entry.vt_to
        end = _next_start(starts.get(line, []), entry.vt_from)
        if self.multi and line is not None:  # a retract-all bounds every object's timeline
            end = min(end, _next_start(starts.get(None, []), entry.vt_from))
        return end


def _next_start(starts: Sequence[datetime], after: datetime) -> datetime:
    i = bisect_right(starts, after)
    return starts[i] if i < len(starts) else OPEN


def _apply(
    key: FactKey, line: tuple[FactVersion, ...], entry: FactEntry, end: datetime, multi: bool
) -> tuple[tuple[FactVersion, ...], list[FactVersion], list[FactVersion]]:
    """Apply ``entry`` on ``[entry.vt_from, end)`` to one timeline's current versions.

    Returns (the timeline's versions after, versions no longer current, versions created).
    """
    start = entry.vt_from
    if start >= end:
        return line, [], []
    lo = max(bisect_right(line, start, key=_vt_from) - 1, 0)
    if lo < len(line) and _vt_to(line[lo]) <= start:
        lo += 1
    hi = bisect_left(line, end, key=_vt_from)
    only = entry.object if entry.op == "retract" and not multi else None
    keep: list[FactVersion] = []
    gone: list[FactVersion] = []
    pieces: list[Segment] = []
    for version in line[lo:hi]:
        if only is not None and version.object != only:
            keep.append(version)
            continue
        gone.append(version)
        seg = Segment.of(version)
        if seg.vt_from < start:
            pieces.append(Segment(seg.object, seg.vt_from, start, seg.source_event_id))
        if end < seg.vt_to:
            pieces.append(Segment(seg.object, end, seg.vt_to, seg.source_event_id))
    if entry.op == "assert" and entry.object is not None:  # FactEntry checks the object
        pieces.append(Segment(entry.object, start, end, entry.event_id))
    new = [new_version(key, seg, entry.tt) for seg in pieces]
    middle = sorted(keep + new, key=_vt_from)
    return (*line[:lo], *middle, *line[hi:]), gone, new
