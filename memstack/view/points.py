"""Point reads: a subject's facts and an event's provenance from a key index, not through a
general query plan.

A facts read names one subject (and maybe a relation) at one as-of; DuckDB answers it through
a query plan whose fixed cost (parse, bind, plan, Arrow conversion, row objects) is most of a
read. :class:`FactPoints` keeps, per ``(tenant, subject)``, every fact version of the subject
(and, once a read at a log cut needed them, its fact entries' positions), each version with
its JSON form made once (:mod:`memstack.view.point_rows`), and per ``(tenant, event_id)`` an
event's provenance as JSON. A facts read filters the subject's versions with the Python form
of the as-of rule (the clauses the DuckDB form renders), so any valid time, known time or log
cut answers exactly what :meth:`DuckDBEventIndex.facts_as_of` does. DuckDB keeps history,
ranges, searches' filters and analytics.

How it stays exact (tests/view/test_point_reads.py):

- **Derived, not a second truth.** A subject is read from DuckDB on its first read (its
  versions through the subject's ART index; its entries' positions only for a cut) and held;
  a replay rebuilds DuckDB, and the index follows from it.
- **Kept by the writer.** The index listens to the event index it reads
  (:meth:`DuckDBEventIndex.on_change`): after each committed batch, the batch's version and
  entry upserts and deletes are applied to the subjects held (by id, as DuckDB applied them)
  and the provenances of the subjects touched are dropped; after any other write (a forget's
  erase, a purge) everything is dropped.
- **No stale install.** Each change has a sequence number and stamps the subjects it touched;
  a load notes the number before its query and installs only if none of its subjects was
  touched (and nothing was dropped) since. A change that lands after the install is applied
  to it (upserts and deletes are idempotent).

A forgotten fact is never answered from here: the erase commits, the listener drops every
subject in the writer's thread before the forget's position counts as applied, and the next
read loads from the erased tables. Held subjects and provenances are bounded (oldest out).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

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
from memstack.pipelines.stores import duckdb_asof
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.view.catalog import Provenance, provenance
from memstack.view.point_rows import Subject, applied, visible

if TYPE_CHECKING:
    from memstack.pipelines.stores.bundle import Stores

MAX_SUBJECTS = 50_000
"""Subjects held at most per event index; the oldest loaded leaves first."""
MAX_PROVENANCES = 20_000
"""Provenances held at most per event index."""

OWNER_FLOOR = 4096
"""The owner map (ids -> subject) is not rebuilt below twice this many ids."""

Key = tuple[str, str]
"""``(tenant, subject)`` of a subject, ``(tenant, event_id)`` of a provenance."""
_PROVENANCE_JSON = TypeAdapter(Provenance)
T = TypeVar("T")


@dataclass(frozen=True)
class Lineage:
    """An event's provenance as JSON, and the subjects whose changes may change it."""

    subjects: frozenset[Key]
    json: bytes


class FactPoints:
    """The key index of one event index (see the module). Thread-safe; reads of what is held
    take no lock."""

    def __init__(self, max_subjects: int = MAX_SUBJECTS,
                 max_provenances: int = MAX_PROVENANCES) -> None:
        self._held: dict[Key, Subject] = {}
        self._lineage: dict[Key, Lineage] = {}
        self._seq = 0
        """Changes seen (each committed batch, each drop)."""
        self._touched: dict[Key, int] = {}
        """Per subject, the number of the last change that touched it."""
        self._floor = 0
        """A load that began before this change may not install (everything was dropped)."""
        self._owner: dict[str, Key] = {}
        """Version and entry ids of the subjects held (and of some held before) -> their
        subject, for deletes by id; an id's subject never changes, so an entry outlives its
        subject harmlessly until the map is rebuilt."""
        self._owner_rebuilt = OWNER_FLOOR
        self._lock = threading.Lock()
        self._max = max_subjects
        self._max_lineage = max_provenances

    # -- reads ---------------------------------------------------------------------------

    def held(self, tenant: str, subject: str) -> Subject | None:
        """The subject if held (no query), else None."""
        return self._held.get((tenant, subject))

    def held_provenance(self, tenant: str, event_id: str) -> bytes | None:
        """The event's provenance as JSON if held (no query), else None."""
        found = self._lineage.get((tenant, event_id))
        return None if found is None else found.json

    def subject(self, events: DuckDBEventIndex, tenant: str, subject: str, *,
                entries: bool = False) -> Subject:
        """The subject, loaded from ``events`` if not held (``entries``: with its entries'
        positions, which a read at a log cut needs)."""
        found = self._held.get((tenant, subject))
        if found is not None and (not entries or found.entries is not None):
            return found
        return self._load(events, tenant, subject, entries)

    def facts(self, events: DuckDBEventIndex, tenant: str, subject: str, relation: str | None,
              valid: datetime, known: datetime | LogCut) -> list[FactVersion]:
        """:meth:`DuckDBEventIndex.facts_as_of` of one subject, from the index."""
        held = self.subject(events, tenant, subject, entries=isinstance(known, LogCut))
        return [h.version for h in visible(held, relation, valid, known)]

    def provenance(self, stores: Stores, tenant: str, event_id: str) -> Provenance | None:
        """:func:`memstack.view.catalog.provenance`, its JSON held for the next reads."""
        seen = self._stamp()
        found = provenance(stores, tenant, event_id)
        if found is None:  # not held yet: a later write may make it
            return None
        subjects = {(tenant, v.subject) for v in (*found.versions_opened,
                                                  *found.versions_closed,
                                                  *found.versions_asserted)}
        if found.fact is not None:
            subjects.add((tenant, found.fact.subject))
        lineage = Lineage(frozenset(subjects), _PROVENANCE_JSON.dump_json(found))
        with self._lock:
            if self._fresh(lineage.subjects, seen):
                self._lineage[(tenant, event_id)] = lineage
                _bound(self._lineage, self._max_lineage)
        return found

    # -- the writer's side ---------------------------------------------------------------

    def changed(self, mutations: Sequence[Mutation] | None) -> None:
        """A listener of :meth:`DuckDBEventIndex.on_change`: apply a committed batch to the
        subjects held, or drop everything (None)."""
        with self._lock:
            self._seq += 1
            if mutations is None:
                self._drop_all()
                return
            touched, unknown = self._touched_by(mutations)
            if unknown:  # a delete of a row no held subject has: its subject is not known
                self._drop_all(keep_subjects=True)
            for key, changes in touched.items():
                self._touched[key] = self._seq
                held = self._held.get(key)
                if held is not None:
                    self._held[key] = self._noted(key, applied(held, changes))
            if touched and self._lineage:
                for key, lineage in list(self._lineage.items()):
                    if not lineage.subjects.isdisjoint(touched):
                        del self._lineage[key]
            if len(self._touched) > 4 * self._max:  # stamps of subjects mostly never held
                self._touched.clear()
                self._floor = self._seq

    def _drop_all(self, *, keep_subjects: bool = False) -> None:
        if not keep_subjects:
            self._held.clear()
            self._owner.clear()
            self._owner_rebuilt = OWNER_FLOOR
        self._lineage.clear()
        self._touched.clear()
        self._floor = self._seq

    def _touched_by(self, mutations: Sequence[Mutation]) -> tuple[dict[Key, list[Mutation]],
                                                                   bool]:
        """The batch's fact mutations per subject, and whether a delete names a row whose
        subject the owner map does not know."""
        touched: dict[Key, list[Mutation]] = {}
        unknown = False
        for m in mutations:
            if isinstance(m, PutFactVersion):
                key: Key | None = (m.row.tenant, m.row.subject)
            elif isinstance(m, PutFactEntry):
                key = (m.entry.tenant, m.entry.subject)
            elif isinstance(m, DeleteFactVersion | DeleteFactEntry):
                key = self._owner.get(m.version_id if isinstance(m, DeleteFactVersion)
                                      else m.event_id)
                unknown = unknown or key is None
            else:
                continue  # records and memory rows are not facts
            if key is not None:
                touched.setdefault(key, []).append(m)
        return touched, unknown

    def _noted(self, key: Key, subject: Subject) -> Subject:
        """``subject``, its ids noted in the owner map, under the lock. The map is rebuilt
        from the subjects held whenever it has doubled since the last rebuild (ids of deleted
        versions and evicted subjects accumulate), so its upkeep is O(1) amortised."""
        _note(self._owner, key, subject)
        if len(self._owner) > 2 * self._owner_rebuilt:
            self._owner.clear()
            for held_key, held in self._held.items():
                _note(self._owner, held_key, held)
            _note(self._owner, key, subject)
            self._owner_rebuilt = max(OWNER_FLOOR, len(self._owner))
        return subject

    def carried(self, subjects: Collection[Key] | None, ids: Collection[str]) -> FactPoints:
        """A new index holding what this one holds, less what changed: the ``subjects``
        touched and the subjects owning the deleted ``ids`` (None: nothing is kept). A reader
        process moves its index so to a newer snapshot (:mod:`memstack.pipelines.service.
        snapshots`); the subjects kept read the same in both."""
        out = FactPoints(self._max, self._max_lineage)
        if subjects is None:
            return out
        with self._lock:
            gone = set(subjects)
            owners = [self._owner.get(i) for i in ids]
            gone.update(key for key in owners if key is not None)
            for key, held in self._held.items():
                if key not in gone:
                    out._held[key] = held
                    _note(out._owner, key, held)
            if None not in owners:  # else a row no held subject has: provenances may name it
                out._lineage = {key: lineage for key, lineage in self._lineage.items()
                                if lineage.subjects.isdisjoint(gone)}
        return out

    # -- loading -------------------------------------------------------------------------

    def _stamp(self) -> int:
        with self._lock:
            return self._seq

    def _fresh(self, keys: Collection[Key], seen: int) -> bool:
        """Whether a load that began at change ``seen`` may install (under the lock)."""
        return self._floor <= seen and all(self._touched.get(k, 0) <= seen for k in keys)

    def _load(self, events: DuckDBEventIndex, tenant: str, subject: str,
              entries: bool) -> Subject:
        key = (tenant, subject)
        seen = self._stamp()
        rows = duckdb_asof.subject_versions(events.query, tenant, subject)
        ids: dict[str, tuple[str, ...]] | None = None
        positions: dict[str, LogPosition] | None = None
        if entries:
            ids, positions = _entries(events, tenant, subject)
        loaded = Subject.of(rows, ids, positions)
        with self._lock:
            if self._fresh([key], seen):
                self._held[key] = self._noted(key, loaded)
                _bound(self._held, self._max)
        return loaded


def _note(owner: dict[str, Key], key: Key, subject: Subject) -> None:
    for h in subject.versions:
        owner[h.version.version_id] = key
    for event_id in subject.positions or ():
        owner[event_id] = key


def _bound(held: dict[Key, T], most: int) -> None:
    while len(held) > most:
        del held[next(iter(held))]


def _entries(events: DuckDBEventIndex, tenant: str, subject: str,
             ) -> tuple[dict[str, tuple[str, ...]], dict[str, LogPosition]]:
    by_relation: dict[str, list[str]] = {}
    positions: dict[str, LogPosition] = {}
    for event_id, relation, position in duckdb_asof.subject_entries(events.query, tenant,
                                                                    subject):
        by_relation.setdefault(relation, []).append(event_id)
        positions[event_id] = position
    return {r: tuple(ids) for r, ids in by_relation.items()}, positions


_INDEXES: weakref.WeakKeyDictionary[DuckDBEventIndex, FactPoints] = (
    weakref.WeakKeyDictionary())
_INDEXES_LOCK = threading.Lock()


def carry_points(old: DuckDBEventIndex, new: DuckDBEventIndex,
                 subjects: Collection[Key] | None, ids: Collection[str]) -> None:
    """Give ``new`` (a newer snapshot) the key index of ``old``, less what changed between
    them (:meth:`FactPoints.carried`); call before anyone reads ``new``."""
    found = _INDEXES.get(old)
    if found is None:
        return
    carried = found.carried(subjects, ids)
    with _INDEXES_LOCK:
        _INDEXES[new] = carried
    new.on_change(carried.changed)


def points_of(events: DuckDBEventIndex) -> FactPoints:
    """The key index of ``events`` (made on first use, listening to its writes)."""
    found = _INDEXES.get(events)
    if found is not None:
        return found
    with _INDEXES_LOCK:
        found = _INDEXES.get(events)
        if found is None:
            found = _INDEXES[events] = FactPoints()
            events.on_change(found.changed)
        return found
