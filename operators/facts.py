"""The bitemporal fact operator: fact events in, fact entries and versions out.

State is per key ``(tenant, subject, relation)``: a :class:`KeyState` holding the key's entries
(sorted by transaction time) and every version derived from them. The versions are a pure
function of the entry *set* (:func:`memstack.operators.timeline.derive`): duplicates, batching
and delivery order do not change them. An entry later than all known ones is applied
incrementally; an earlier one (out-of-order delivery across partitions) or a forget recomputes
the key's history from that transaction time on and emits the diff.

``KeyState`` is an immutable value (``apply_fact(state, logged) -> (state, mutations)``);
:class:`FactOperator` is the small stateful wrapper over all keys, with ``snapshot()`` /
``restore()`` and an optional loader that seeds a key from a sink's stored entries.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from memstack.foundation.errors import MemstackError
from memstack.operators.log import LoggedEvent, LogPosition
from memstack.operators.mutations import (
    DeleteFactEntry,
    FactEntry,
    FactVersion,
    Mutation,
    PutFactEntry,
    PutFactVersion,
)
from memstack.operators.relations import RelationRegistry
from memstack.operators.timeline import FactKey, Timelines, diff
from memstack.schemas.events import FactAssertedPayload, FactRetractedPayload

log = logging.getLogger(__name__)

EntryLoader = Callable[[FactKey], Iterable[FactEntry]]
"""Reads the stored entries of one key (from a sink) to seed its state."""


class NotAFactEventError(MemstackError, ValueError):
    """The event is not a fact_asserted / fact_retracted event; route it to another operator."""


def fact_entry(logged: LoggedEvent) -> FactEntry:
    """The timeline entry of a fact event: valid time from the event, tt from the log."""
    event, payload = logged.event, logged.event.payload
    if not isinstance(payload, FactAssertedPayload | FactRetractedPayload) or not event.subject:
        raise NotAFactEventError(
            f"event {event.event_id} of kind '{event.kind}' is not a fact event with a subject"
        )
    return FactEntry(
        event_id=event.event_id,
        tenant=event.tenant,
        subject=event.subject,
        relation=payload.relation,
        object=payload.object,
        op="assert" if isinstance(payload, FactAssertedPayload) else "retract",
        vt_from=event.valid_start,
        vt_to=event.valid_to,
        tt=logged.position,
    )


@dataclass(frozen=True)
class KeyState:
    """Entries (sorted by :attr:`FactEntry.order`) and the versions derived from them, of one key.

    ``closed`` holds the versions ended in transaction time (they change only when a recompute
    reaches back before their end); ``position`` the current ones, indexed for the next entry.
    """

    key: FactKey
    multi: bool
    entries: tuple[FactEntry, ...] = ()
    closed: tuple[FactVersion, ...] = ()
    position: Timelines | None = None
    by_id: Mapping[str, FactEntry] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_entries(cls, key: FactKey, entries: Iterable[FactEntry], *, multi: bool) -> KeyState:
        """Seed a key from stored entries (e.g. a sink's fact_entries table): a full build."""
        return cls(key, multi).add(entries)[0]

    @property
    def current(self) -> tuple[FactVersion, ...]:
        """Versions still current in transaction time."""
        return self._position.versions()

    @property
    def versions(self) -> tuple[FactVersion, ...]:
        """All versions of the key, closed and current (in no particular order)."""
        return self.closed + self.current

    @property
    def _position(self) -> Timelines:
        return self.position if self.position is not None else Timelines(self.multi)

    def add(self, entries: Iterable[FactEntry]) -> tuple[KeyState, list[Mutation]]:
        """Add entries (any order, duplicates allowed); return the new state and mutations."""
        merged, changed = _merge(self.by_id, entries, self.key)
        if not changed:
            return self, []
        head: list[Mutation] = [PutFactEntry(e) for e in changed]
        fresh = sorted(changed, key=lambda e: e.order)
        appended = not any(e.event_id in self.by_id for e in fresh) and (
            not self.entries or fresh[0].order > self.entries[-1].order
        )
        if appended:
            return self._appended(tuple(fresh), merged, head)
        # A duplicate event id only ever replaces an entry by an earlier tt, so the earliest
        # changed tt also covers the position the replaced entry had.
        ordered = tuple(sorted(merged.values(), key=lambda e: e.order))
        return self._rebuilt(ordered, merged, fresh[0].tt, head)

    def remove(self, event_ids: Iterable[str]) -> tuple[KeyState, list[Mutation]]:
        """Drop entries as if never seen (forgetting); return the new state and mutations."""
        gone = [self.by_id[i] for i in set(event_ids) if i in self.by_id]
        if not gone:
            return self, []
        drop = {e.event_id for e in gone}
        ordered = tuple(e for e in self.entries if e.event_id not in drop)
        merged = {e.event_id: e for e in ordered}
        since = min(e.tt for e in gone)
        head: list[Mutation] = [DeleteFactEntry(i) for i in sorted(drop)]
        return self._rebuilt(ordered, merged, since, head)

    def _appended(
        self, fresh: tuple[FactEntry, ...], merged: Mapping[str, FactEntry], head: list[Mutation]
    ) -> tuple[KeyState, list[Mutation]]:
        """The common case: entries later than all known ones, replayed incrementally."""
        position, closed, created = self._position.replay(self.key, fresh)
        final = {v.version_id: v for v in created} | {v.version_id: v for v in closed}
        changes: list[Mutation] = [PutFactVersion(final[i]) for i in sorted(final)]
        state = KeyState(self.key, self.multi, self.entries + fresh, self.closed + tuple(closed),
                         position, merged)
        return state, head + changes

    def _rebuilt(
        self,
        ordered: tuple[FactEntry, ...],
        merged: Mapping[str, FactEntry],
        since: LogPosition,
        head: list[Mutation],
    ) -> tuple[KeyState, list[Mutation]]:
        """Recompute from transaction time ``since`` on and emit the diff of the rows touched.

        Versions that ended before ``since`` cannot change; versions current at ``since`` are
        reopened and the entries from ``since`` on are replayed over them.
        """
        # ``closed`` is kept sorted by tt_to (each replay appends later closes), so the versions
        # ended before ``since`` are a prefix and cannot change.
        split = bisect_left(self.closed, since, key=_closed_at)
        kept, ended = self.closed[:split], self.closed[split:]
        mark = (since.log_time, since.partition, since.offset)
        before = [v for v in self.current if _opened(v) < mark]
        after = [v for v in self.current if _opened(v) >= mark]
        reopened = [v.reopened() for v in ended if _opened(v) < mark]
        start = bisect_left(ordered, since, key=lambda e: e.tt)
        base = Timelines.at(self.multi, [*before, *reopened], ordered[:start])
        position, closed, created = base.replay(self.key, ordered[start:])
        # Rows touched: every version replayed (created, reopened, closed again); versions
        # current before ``since`` and still current are the same rows and emit nothing.
        final = {v.version_id: v for v in (*created, *reopened)}
        final.update((v.version_id, v) for v in closed)
        old = [*ended, *after, *(v for v in before if v.version_id in final)]
        changes = diff(old, final.values())
        log.debug("fact key %s: recomputed from %s, %d changes", self.key, since, len(changes))
        state = KeyState(self.key, self.multi, ordered, (*kept, *closed), position, merged)
        return state, head + changes


def _opened(version: FactVersion) -> tuple[datetime, int, int]:
    return (version.tt_from, version.tt_from_partition, version.tt_from_offset)


def _closed_at(version: FactVersion) -> LogPosition:
    ended = version.tt_to_pos
    if ended is None:
        raise ValueError(f"version {version.version_id} is current, not closed")
    return ended


def _merge(
    known: Mapping[str, FactEntry], entries: Iterable[FactEntry], key: FactKey
) -> tuple[dict[str, FactEntry], list[FactEntry]]:
    """Entries by event id, keeping the earliest tt of duplicates; and the ones that changed."""
    merged = dict(known)
    changed: dict[str, FactEntry] = {}
    for entry in entries:
        if FactKey.of(entry) != key:
            raise ValueError(f"entry {entry.event_id} belongs to {FactKey.of(entry)}, not {key}")
        old = merged.get(entry.event_id)
        if old is None or entry.order < old.order:
            merged[entry.event_id] = entry
            changed[entry.event_id] = entry
    return merged, list(changed.values())


def apply_fact(state: KeyState, logged: LoggedEvent) -> tuple[KeyState, list[Mutation]]:
    """Pure step: one fact event into its key's state."""
    return state.add([fact_entry(logged)])


@dataclass(frozen=True)
class FactSnapshot:
    """The fact operator's state at one point: one immutable state per key."""

    states: tuple[KeyState, ...]

    def entries(self) -> tuple[FactEntry, ...]:
        """The compact, serialisable form: all entries (versions are derived from them)."""
        return tuple(e for s in self.states for e in s.entries)


class FactOperator:
    """All fact keys; pure per key, stateful across keys (snapshot()/restore())."""

    def __init__(
        self, registry: RelationRegistry | None = None, loader: EntryLoader | None = None
    ) -> None:
        self._registry = registry or RelationRegistry()
        self._loader = loader
        self._states: dict[FactKey, KeyState] = {}
        self._key_of: dict[str, FactKey] = {}

    def state_of(self, key: FactKey) -> KeyState:
        """The key's state: in memory, else seeded by the loader, else empty."""
        state = self._states.get(key)
        if state is None:
            multi = self._registry.is_multi(key.relation)
            stored = self._loader(key) if self._loader is not None else ()
            state = KeyState.from_entries(key, stored, multi=multi)
            self._put(state, state.entries)
        return state

    def apply(self, logged: LoggedEvent) -> list[Mutation]:
        return self.apply_entries([fact_entry(logged)])

    def apply_entries(self, entries: Iterable[FactEntry]) -> list[Mutation]:
        """Apply entries grouped by key (one recomputation per key per call)."""
        by_key: dict[FactKey, list[FactEntry]] = defaultdict(list)
        for entry in entries:
            by_key[FactKey.of(entry)].append(entry)
        out: list[Mutation] = []
        for key in sorted(by_key):
            state, mutations = self.state_of(key).add(by_key[key])
            self._put(state, by_key[key])
            out.extend(mutations)
        return out

    def forget(
        self, event_ids: Iterable[str], keys: Iterable[FactKey] = ()
    ) -> list[Mutation]:
        """Recompute without these entries, as if never seen.

        Looks in every key it holds an entry of the events of; ``keys`` names more keys to load
        (when state is sink-backed and the key is not in memory).
        """
        ids = set(event_ids)
        targets = {self._key_of[i] for i in ids if i in self._key_of} | set(keys)
        out: list[Mutation] = []
        for key in sorted(targets):
            state, mutations = self.state_of(key).remove(ids)
            self._put(state, ())
            out.extend(mutations)
        for event_id in ids:
            self._key_of.pop(event_id, None)
        return out

    def snapshot(self) -> FactSnapshot:
        return FactSnapshot(tuple(self._states[k] for k in sorted(self._states)))

    def restore(self, snapshot: FactSnapshot) -> None:
        self._states.clear()
        self._key_of.clear()
        for state in snapshot.states:
            self._put(state, state.entries)

    def evict(self, key: FactKey) -> None:
        """Drop a key from memory (a loader re-seeds it on next use)."""
        state = self._states.pop(key, None)
        for entry in state.entries if state is not None else ():
            self._key_of.pop(entry.event_id, None)

    def _put(self, state: KeyState, added: Iterable[FactEntry]) -> None:
        """Keep ``state`` for its key and index the event ids of the entries just ``added``."""
        self._states[state.key] = state
        for entry in added:
            self._key_of[entry.event_id] = state.key
