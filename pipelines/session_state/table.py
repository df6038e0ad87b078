"""Durable session state in the live pipeline: an in-place arena, snapshots in a changelog topic.

Per batch of logged events the :class:`SessionStateUpdater` embeds the items' texts (or takes the
commit path's vectors of them), adds every
session's terms in one batched in-place update (:class:`StateArena`), and writes one snapshot per
touched session (:func:`snapshot_sums` bytes, fixed size) to the changelog topic, keyed
``tenant/session`` on the partition of the session's events, and waits for the broker's
acknowledgements. The changelog is compacted: the latest snapshot per session is the state, and a
tombstone (``None``) drops it. Its Kafka bindings (the Faust table, the sinks) are in
:mod:`memstack.pipelines.session_state.changelog`, re-exported here.

Exactly once in effect: every session's snapshot carries the next offset per events partition
(``marks["p<partition>"]``); events below it are skipped, so a redelivered batch adds nothing.
The snapshot is acknowledged *before* the stores commit the batch's offsets (step 5 of
:class:`~memstack.pipelines.commit_path.CommitPath`), so a crash never leaves the stores ahead
of the state.

Forgetting: :meth:`SessionStateUpdater.removal` plans, :meth:`~SessionStateUpdater.apply_removal`
subtracts exactly the terms of forgotten items (their texts, log positions and times recovered
from the stores, see ``memstack.pipelines.forgetting.session_state_store``), once per forget
request (``marks["f<partition>"]``); a session left with no item is dropped (a tombstone).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from memstack.foundation.log_coordinates import advance
from memstack.operators.log import LoggedEvent
from memstack.operators.session_state import StateConfig, codes
from memstack.operators.session_state.arena import SessionSums, StateArena
from memstack.operators.session_state.codec import restore_sums, snapshot_slot, snapshot_sums
from memstack.operators.session_state.codes import RingConfig
from memstack.operators.session_state.keys import N_HEADS, Head
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.session_state.changelog import (  # re-exported: the table's bindings
    CHANGELOG_CONFIGS,
    TABLE_NAME,
    FaustTableSink,
    KafkaSink,
    changelog_topic,
    define_table,
    ensure_changelog_topic,
    latest_snapshots,
)
from memstack.pipelines.session_state.items import (  # re-exported: the state's items
    StateItem,
    applied,
    by_key,
    item_of,
    key_of,
    runs_within,
    session_key,
)
from memstack.pipelines.session_state.terms import ItemTerms, Vectors

log = logging.getLogger(__name__)

DEFAULT_CONFIG = StateConfig(dim=8)
"""The sums of the default state: the facts head's associative read and the item counts and
log times the forget path keeps (docs/session-state.md, "The default state")."""


__all__ = [
    "CHANGELOG_CONFIGS", "DEFAULT_CONFIG", "DEFAULT_RING", "STATE_BUDGET", "TABLE_NAME",
    "ApplyResult", "ChangelogSink", "FaustTableSink", "KafkaSink", "Removal",
    "SessionStateUpdater", "SnapshotSource", "Staged",
    "StateItem", "applied", "changelog_topic", "define_table", "ensure_changelog_topic",
    "item_of", "key_of", "latest_snapshots", "session_key", "state_bytes",
]


def state_bytes(config: StateConfig, ring: RingConfig | None) -> int:
    """Bytes of one session's snapshot with these configs (a new session's; marks and times add
    a few bytes of header as a session lives)."""
    d = config.dim
    state = SessionSums(config, torch.zeros(N_HEADS, d + 1, 2 * d + 1, dtype=config.torch_dtype),
                        0.0, 0.0, (0,) * N_HEADS, {},
                        None if ring is None else codes.empty(ring))
    return len(snapshot_sums(state))


STATE_BUDGET = 8192
"""Bytes of a new session's default state, all of it (chosen on the tuning conversations by
``memstack eval openproblems``: docs/session-state.md)."""
DEFAULT_RING = RingConfig(bits=192, budget=STATE_BUDGET - state_bytes(DEFAULT_CONFIG, None),
                          salient=0.75)
"""The code ring of the default state, in what the budget leaves after the sums and the header:
192-bit codes of 204 turns, the latest 51 and the 153 longest older ones."""


class ChangelogSink(Protocol):
    """Where snapshots go: ``send`` one keyed value (None: tombstone) to a partition; ``flush``
    returns once the broker acknowledged everything sent."""

    def send(self, partition: int, key: str, value: bytes | None) -> None: ...

    async def flush(self) -> None: ...


class SnapshotSource(Protocol):
    """The latest snapshot bytes of a session key (None: no state)."""

    def get(self, key: str) -> bytes | None: ...


@dataclass(frozen=True)
class ApplyResult:
    """What one batch did: items added, sessions written, events skipped as already applied."""

    items: int
    sessions: int
    skipped: int


@dataclass(frozen=True)
class Staged:
    """A batch added to the arena, its snapshots not sent yet (``SessionStateUpdater.stage``)."""

    snapshots: list[tuple[int, str, bytes]]
    """``(partition, session key, snapshot bytes)`` per touched session."""
    result: ApplyResult


@dataclass(frozen=True)
class Removal:
    """What one forget request does to the states (:meth:`SessionStateUpdater.removal`)."""

    mark: tuple[int, int]
    """The request's ``(partition, offset)`` in the forget topic."""
    subtract: dict[str, list[StateItem]] = field(default_factory=dict)
    """Per session, the terms to subtract: items the state added, each once."""
    drop: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Sessions every one of whose items goes: ``(partition, items)``; dropped whole."""
    last_times: dict[str, float] = field(default_factory=dict)
    """Per session in ``subtract``, its new last log time: its latest surviving item's."""
    refill: dict[str, list[StateItem]] = field(default_factory=dict)
    """Per session in ``subtract``, the surviving turns its code ring holds after the removal
    (the ring is a function of the session's turns; those it already holds are among them)."""

    @property
    def items(self) -> list[StateItem]:
        return [item for group in self.subtract.values() for item in group]

    @property
    def refill_items(self) -> list[StateItem]:
        return [item for group in self.refill.values() for item in group]

    @property
    def terms(self) -> int:
        return len(self.items) + sum(n for _, n in self.drop.values())


class SessionStateUpdater:
    """Applies batches of logged events to the session states of one worker."""

    def __init__(self, sink: ChangelogSink, source: SnapshotSource, encoder: Encoder, *,
                 config: StateConfig = DEFAULT_CONFIG, ring: RingConfig | None = DEFAULT_RING,
                 capacity: int = 256) -> None:
        self.sink, self.source, self.encoder, self.config = sink, source, encoder, config
        self.arena = StateArena(config, capacity, ring)
        self._lru: OrderedDict[str, None] = OrderedDict()
        self.terms = ItemTerms(encoder, config, ring)
        self._unsent: dict[str, bytes] = {}
        """Snapshots :meth:`stage` cut that :meth:`publish` has not sent yet: a session evicted
        in between reloads from here, not from the source's older snapshot."""
        self._unsent_lock = threading.Lock()

    def state(self, key: str) -> SessionSums | None:
        """The current state of ``key`` (from the arena, else its latest snapshot)."""
        slot = self.arena.slot_of(key)
        if slot is not None:
            return self.arena.cut(slot)
        data = self._stored(key)
        return None if data is None else restore_sums(data)

    def snapshot(self, tenant: str, session: str) -> bytes | None:
        """The session's current state as snapshot bytes (None: no state). Read from another
        thread (the inspector's) it may see a batch half added: a size, not a consistent read."""
        state = self.state(session_key(tenant, session))
        return None if state is None else snapshot_sums(state)

    def _stored(self, key: str) -> bytes | None:
        with self._unsent_lock:
            if key in self._unsent:
                return self._unsent[key]
        return self.source.get(key)

    def _slot(self, key: str) -> int:
        slot = self.arena.slot_of(key)
        if slot is None:
            if len(self.arena) >= self.arena.capacity:  # evict the least recently used
                old, _ = self._lru.popitem(last=False)
                self.arena.free(old)  # its latest snapshot is stored, or in self._unsent
            data = self._stored(key)
            slot = (self.arena.load(key, restore_sums(data)) if data is not None
                    else self.arena.slot(key))
        self._lru[key] = None
        self._lru.move_to_end(key)
        return slot

    def texts(self, events: Sequence[LoggedEvent]) -> list[str]:
        """The texts :meth:`stage` embeds for ``events``: the items' keys, then their values."""
        items = [i for e in events if (i := item_of(e)) is not None]
        return [i.texts.key_text for i in items] + [i.texts.value_text for i in items]

    def warm_items(self, items: Sequence[StateItem]) -> None:
        """Embed the items' texts now, so that a caching encoder answers the next step at once."""
        self.terms.embedded(items)

    async def apply(self, events: Sequence[LoggedEvent]) -> ApplyResult:
        """Add the events' items, write the touched sessions' snapshots, wait for the acks."""
        return await self.publish(self.stage(events))

    def stage(self, events: Sequence[LoggedEvent], vectors: Vectors | None = None) -> Staged:
        """Add the events' items to the arena and cut the touched sessions' snapshots, on the
        calling thread (the worker's store thread: the arithmetic stays off the event loop);
        :meth:`publish` then sends them. Call both from one thread at a time, in order.
        ``vectors``: embeddings by text (the commit path's); texts not in it are encoded.

        Events touching more sessions than the arena holds (a batch of 512 over many users)
        are staged in runs of at most ``capacity`` sessions, each run's snapshots cut before
        the next may evict its sessions."""
        snapshots: dict[str, tuple[int, bytes]] = {}
        added = skipped = 0
        for run in runs_within(events, self.arena.capacity):
            fresh, skips = self._fresh(run)
            items = [i for e in fresh if (i := item_of(e)) is not None]
            if items:
                slots = [self._slot(i.key) for i in items]
                embedded = self.terms.embedded(items, vectors)
                self.arena.add(self.terms.terms(slots, items, embedded))
                self.terms.add_codes(self.arena, slots, items, embedded)
            touched: dict[str, int] = {}
            for logged in fresh:  # marks move for every event, with or without an item
                key, pos = key_of(logged.event), logged.position
                marks = self.arena.marks[self._slot(key)]
                advance(marks, f"p{pos.partition}", pos.offset)
                touched[key] = pos.partition
            cut = {key: snapshot_slot(self.arena, self._slot(key)) for key in touched}
            snapshots.update((key, (touched[key], snap)) for key, snap in cut.items())
            with self._unsent_lock:
                self._unsent.update(cut)
            added, skipped = added + len(items), skipped + skips
        return Staged([(partition, key, snap) for key, (partition, snap) in snapshots.items()],
                      ApplyResult(added, len(snapshots), skipped))

    async def publish(self, staged: Staged) -> ApplyResult:
        """Send :meth:`stage`'s snapshots to the changelog (on the sink's loop), wait for the
        acknowledgements."""
        for partition, key, snapshot in staged.snapshots:
            self.sink.send(partition, key, snapshot)
            with self._unsent_lock:  # the source holds it now (unless staged again since)
                if self._unsent.get(key) is snapshot:
                    del self._unsent[key]
        await self.sink.flush()
        return staged.result

    def _fresh(self, events: Sequence[LoggedEvent]) -> tuple[list[LoggedEvent], int]:
        """Events not yet in their session's state (by the snapshot's offset marks)."""
        fresh: list[LoggedEvent] = []
        seen: set[tuple[int, int]] = set()
        for logged in events:
            pos = logged.position
            marks = self.arena.marks[self._slot(key_of(logged.event))]
            if pos.offset < marks.get(f"p{pos.partition}", 0) or (
                    (pos.partition, pos.offset) in seen):
                continue
            seen.add((pos.partition, pos.offset))
            fresh.append(logged)
        return fresh, len(events) - len(fresh)

    async def remove(self, events: Sequence[LoggedEvent], request_mark: tuple[int, int]) -> int:
        """Subtract exactly the terms of forgotten ``events``; the number of terms removed.

        See :meth:`removal` (a session left with no item is dropped).
        """
        items = [i for e in events if (i := item_of(e)) is not None]
        return (await self.apply_removal(self.removal(items, request_mark))).terms

    def removal(self, items: Sequence[StateItem], request_mark: tuple[int, int],
                kept: Sequence[StateItem] | None = None) -> Removal:
        """What forgetting ``items`` (recomputed from the stores) does; nothing is changed yet.

        ``request_mark`` is the forget request's ``(partition, offset)`` in the forget topic: a
        session that already applied it (or a later one of that partition) skips it, so a
        request processed twice subtracts once. Items the state never added (at or past its
        offset marks) are skipped. A session all of whose items go is dropped whole. ``kept``:
        items the stores keep for the same sessions; the latest of them becomes the session's
        last log time (its default read time), as in a state that never saw the forgotten ones.
        Call it between batches (it reads the states' marks and counts).
        """
        r_part, r_off = request_mark
        plan = Removal(request_mark)
        later = by_key(kept or ())
        for key, group in by_key(items).items():
            if self.arena.slot_of(key) is None and self._stored(key) is None:
                continue
            slot = self._slot(key)
            marks = self.arena.marks[slot]
            if r_off < marks.get(f"f{r_part}", 0):
                continue
            added = [i for i in group if applied(i, marks)]
            if not added:
                continue
            heads = torch.bincount(torch.tensor([int(i.texts.head) for i in added]),
                                   minlength=N_HEADS)
            if torch.equal(heads, self.arena.counts[slot]):
                plan.drop[key] = (added[0].partition, len(added))
                continue
            plan.subtract[key] = added
            gone = {i.event_id for i in added}
            survivors = [i for i in later.get(key, ())
                         if applied(i, marks) and i.event_id not in gone]
            if survivors:
                plan.last_times[key] = max(i.log_time for i in survivors)
            refill = self._refill(slot, survivors)
            if refill:
                plan.refill[key] = refill
        return plan

    def _refill(self, slot: int, survivors: Sequence[StateItem]) -> list[StateItem]:
        """The surviving turns the slot's ring holds once the forgotten ones are gone: picked
        by offset and length alone (:func:`codes.chosen`), so only they are embedded and coded,
        however long the session."""
        ring = self.arena.rings[slot]
        if ring is None:
            return []
        turns = [i for i in survivors if i.texts.head == Head.TURNS]
        keep = codes.chosen(ring.config, [i.offset for i in turns],
                            codes.lengths_of([i.texts.key_text for i in turns]))
        return [turns[n] for n in keep.tolist()]

    async def apply_removal(self, plan: Removal) -> Removal:
        """Carry out :meth:`removal`'s plan: subtract, snapshot or tombstone, wait for the acks."""
        r_part, r_off = plan.mark
        for key, group in plan.subtract.items():
            slot = self._slot(key)
            self.arena.subtract(self.terms.terms([slot] * len(group), group,
                                                 self.terms.embedded(group)))
            refill = plan.refill.get(key, [])
            rows, table, lengths = self.terms.turn_codes(refill, self.terms.embedded(refill))
            self.arena.remove_codes(slot, [i.offset for i in group
                                           if i.texts.head == Head.TURNS],
                                    [refill[n].offset for n in rows], table, lengths)
            self.arena.marks[slot][f"f{r_part}"] = r_off + 1
            if key in plan.last_times:
                self.arena.last[slot] = min(float(self.arena.last[slot]), plan.last_times[key])
            self.sink.send(group[0].partition, key, snapshot_sums(self.arena.cut(slot)))
        for key, (partition, _) in plan.drop.items():
            self._forget_slot(key)
            self.sink.send(partition, key, None)
        await self.sink.flush()
        return plan

    async def drop(self, keys: Iterable[tuple[str, int]]) -> int:
        """Drop whole sessions ``(key, partition)``: out of the arena, a tombstone in the log."""
        n = 0
        for key, partition in keys:
            self._forget_slot(key)
            self.sink.send(partition, key, None)
            n += 1
        await self.sink.flush()
        return n

    def _forget_slot(self, key: str) -> None:
        self.arena.evict(key)
        self._lru.pop(key, None)
        with self._unsent_lock:
            self._unsent.pop(key, None)

    def recompute(self, items: Sequence[StateItem]) -> dict[str, SessionSums]:
        """The states that ``items`` alone build, per session (a scratch arena; nothing is
        written): what a state should hold, for audits and tests."""
        keys = sorted({i.key for i in items})
        scratch = StateArena(self.config, max(1, len(keys)), self.arena.ring_config)
        slots = {key: scratch.slot(key) for key in keys}
        if items:
            at = [slots[i.key] for i in items]
            embedded = self.terms.embedded(items)
            scratch.add(self.terms.terms(at, items, embedded))
            self.terms.add_codes(scratch, at, items, embedded)
        return {key: scratch.cut(slot) for key, slot in slots.items()}
