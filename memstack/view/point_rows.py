"""What a key index holds of one subject, and which of it answers a read as of a time or cut.

:class:`Subject` is an immutable snapshot of a subject's fact versions (each :class:`Held`
with its as-of columns and its JSON bytes, made once) and, when a read at a log cut needed
them, its fact entries' positions. :func:`visible` is the as-of rule's Python form
(:func:`memstack.schemas.asof.matcher`, the clauses the DuckDB form renders) over them;
:func:`applied` is a snapshot after a committed batch. Used by :mod:`memstack.view.points`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from memstack.foundation.log_coordinates import LogCut, LogPosition
from memstack.operators.mutations import (
    DeleteFactEntry,
    DeleteFactVersion,
    FactVersion,
    Mutation,
    PutFactEntry,
    PutFactVersion,
)
from memstack.schemas import asof

_VERSION_JSON = TypeAdapter(FactVersion)
_RULE_COLUMNS = ("vt_from", "vt_to", "tt_from", "tt_to", "tt_from_partition", "tt_from_offset",
                 "tt_to_partition", "tt_to_offset")
_NO_FIRST = dict.fromkeys((asof.FIRST.time, asof.FIRST.partition, asof.FIRST.offset))


@dataclass(frozen=True)
class Held:
    """One version as held: the row, its as-of columns (for the rule), its JSON bytes."""

    version: FactVersion
    columns: Mapping[str, Any]
    json: bytes

    @classmethod
    def of(cls, version: FactVersion) -> Held:
        columns = {name: getattr(version, name) for name in _RULE_COLUMNS}
        return cls(version, columns, _VERSION_JSON.dump_json(version))


def _order(held: Held) -> tuple[str, datetime, str]:
    v = held.version
    return (v.relation, v.vt_from, v.object)  # the general path's ORDER BY within a subject


@dataclass(frozen=True)
class Subject:
    """Everything held of one subject: an immutable snapshot, replaced on each change."""

    versions: tuple[Held, ...]
    """In the general path's order (relation, ``vt_from``, object)."""
    current: tuple[Held, ...]
    """The versions still current in transaction time (``tt_to`` open)."""
    latest: datetime | None
    """The latest transaction time of any version's start or end: a known time at or after
    it sees exactly :attr:`current`."""
    entries: Mapping[str, tuple[str, ...]] | None = None
    """Per relation, the event ids of its fact entries (None: not loaded; a cut loads them)."""
    positions: Mapping[str, LogPosition] | None = None
    """Each entry's log position, by event id (with :attr:`entries`)."""

    @classmethod
    def of(cls, versions: Iterable[FactVersion], entries: Mapping[str, tuple[str, ...]] | None,
           positions: Mapping[str, LogPosition] | None) -> Subject:
        return cls.of_held((Held.of(v) for v in versions), entries, positions)

    @classmethod
    def of_held(cls, versions: Iterable[Held], entries: Mapping[str, tuple[str, ...]] | None,
                positions: Mapping[str, LogPosition] | None) -> Subject:
        held = tuple(sorted(versions, key=_order))
        times = [t for h in held for t in (h.version.tt_from, h.version.tt_to) if t is not None]
        return cls(held, tuple(h for h in held if h.version.tt_to is None),
                   max(times) if times else None, entries, positions)


def applied(held: Subject, changes: Sequence[Mutation]) -> Subject:
    """``held`` after ``changes`` (in order: the last change of an id wins, as in DuckDB);
    the versions not changed keep their JSON."""
    versions = {h.version.version_id: h for h in held.versions}
    entries = None if held.entries is None else {
        r: dict.fromkeys(ids) for r, ids in held.entries.items()}
    positions = None if held.positions is None else dict(held.positions)
    for m in changes:
        if isinstance(m, PutFactVersion):
            versions[m.row.version_id] = Held.of(m.row)
        elif isinstance(m, DeleteFactVersion):
            versions.pop(m.version_id, None)
        elif entries is not None and positions is not None:
            entry_change(m, entries, positions)
    if entries is None or positions is None:
        return Subject.of_held(versions.values(), None, None)
    ordered = {r: tuple(sorted(ids, key=positions.__getitem__)) for r, ids in entries.items()}
    return Subject.of_held(versions.values(), {r: ids for r, ids in ordered.items() if ids},
                           positions)


def entry_change(m: Mutation, entries: dict[str, dict[str, None]],
                 positions: dict[str, LogPosition]) -> None:
    """One entry upsert or delete applied to a subject's entries (by relation) and positions."""
    if isinstance(m, PutFactEntry):
        e = m.entry
        for ids in entries.values():  # an upsert may move an id between relations
            ids.pop(e.event_id, None)
        entries.setdefault(e.relation, {})[e.event_id] = None
        positions[e.event_id] = e.tt
    elif isinstance(m, DeleteFactEntry):
        for ids in entries.values():
            ids.pop(m.event_id, None)
        positions.pop(m.event_id, None)


def visible(held: Subject, relation: str | None, valid: datetime,
            known: datetime | LogCut) -> list[Held]:
    """The held versions that answer as of ``(valid, known)`` (of ``relation`` if given), in
    the general path's order."""
    if isinstance(known, datetime) and held.latest is not None and known >= held.latest:
        rows, rule = held.current, asof.matcher(valid, None, asof.VERSIONS)  # all known
    elif isinstance(known, datetime):
        rows, rule = held.versions, asof.matcher(valid, known, asof.VERSIONS)
    else:
        return _at_cut(held, relation, valid, known)
    return [h for h in rows if (relation is None or h.version.relation == relation)
            and rule(h.columns)]


def _at_cut(held: Subject, relation: str | None, valid: datetime, cut: LogCut) -> list[Held]:
    """At a log cut: per relation, the rule just before its first entry outside the cut."""
    assert held.entries is not None and held.positions is not None, "a cut needs the entries"
    first: dict[str, dict[str, Any]] = {}
    for rel, ids in held.entries.items():
        outside = next((held.positions[i] for i in ids
                        if not cut.knows(held.positions[i].partition,
                                         held.positions[i].offset)), None)
        first[rel] = {asof.FIRST.time: None if outside is None else outside.log_time,
                      asof.FIRST.partition: None if outside is None else outside.partition,
                      asof.FIRST.offset: None if outside is None else outside.offset}
    rule = asof.matcher(valid, cut, asof.VERSIONS)
    return [h for h in held.versions if (relation is None or h.version.relation == relation)
            and rule({**h.columns, **first.get(h.version.relation, _NO_FIRST)})]


