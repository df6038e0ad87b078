"""The session state under the forget contract: exact removal of a forgotten event's term.

The durable state keeps sums only (no per-item table), so a forgotten event's term is rebuilt
from the stores: turns from DuckDB ``records`` (session, log position, text) with their LanceDB
vector (the very vector the live state added), asserted facts from ``fact_entries`` (subject,
relation, object, log position; re-embedded). Fact entries keep no session; the log's envelopes
(``Lineage``: in the clear even when payloads are sealed or shredded) place them. The stores
erase those rows, so this store forgets first (:class:`ForgetsFirst`: the
:class:`ForgetProcessor` runs it before the DuckDB and LanceDB stores); its forget is idempotent
(once per request, by the state's marks), so a retry after a crash in between is safe. It:

- subtracts exactly each forgotten item's term the state added (``SessionStateUpdater.removal``:
  once per request, only items below the state's offset marks);
- drops a session all of whose items go (whole-session scopes; a changelog tombstone), and
  only those: a session's events logged after a session request are new data and stay;
- sets each session's last log time back to its latest surviving item's,

so the state equals one built without the forgotten events (to float rounding for turns and
for facts whose texts the encoder cache still holds; MiniLM's batch noise, ≤ 1e-6 per vector
measured, for facts re-embedded in another batch).

``residuals(probe)`` recomputes every session of the probe's events from the items the stores
still hold (minus the probe's) and compares, head by head: a state whose sums differ by more
than :data:`RESIDUAL_TOLERANCE` (relative) or whose item counts differ still holds something.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from memstack.operators.forget import Tombstones
from memstack.operators.session_state.arena import SessionSums
from memstack.operators.session_state.keys import N_HEADS, fact_texts, turn_texts
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.forgetting.bundle import ForgetStores
from memstack.pipelines.forgetting.contract import AuditProbe, ForgetReport, Residual
from memstack.pipelines.forgetting.lance_store import id_filter
from memstack.pipelines.forgetting.lineage import Lineage, LogEntry
from memstack.pipelines.session_state.table import (
    KafkaSink,
    SessionStateUpdater,
    StateItem,
    applied,
    latest_snapshots,
    session_key,
)
from memstack.pipelines.stores import arrow
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.lance_index import LanceVectorIndex
from memstack.schemas.events import ForgetScope

log = logging.getLogger(__name__)

NAME = "session_state"
RESIDUAL_TOLERANCE = 1e-4
"""Relative difference per head above which a state disagrees with its recomputation. The
recomputation re-embeds facts (MiniLM batch noise: ≤ 1e-6 per vector); an undecayed leftover term
in a head of n items weighs about 1/n, so leftovers are seen in heads of up to ~10⁴ items."""
HASH_TOLERANCE = 1e-6
"""Grid of the sketch coordinates in :func:`content_hash`."""
SKETCH = 8

Run = Callable[[Coroutine[Any, Any, Any]], Any]


class StoreItems:
    """The items of session states as the stores hold their events (see the module doc)."""

    def __init__(self, events: Callable[[], DuckDBEventIndex], lineage: Lineage | None,
                 vectors: Callable[[], LanceVectorIndex] | None = None) -> None:
        """``events``: the current event index (the DuckDB forget store reopens its file after
        compaction); ``lineage``: the log's envelopes (without it facts cannot be placed);
        ``vectors``: the memory rows, whose stored embeddings are the very vectors the live
        state added for turns (one encoder cache serves both), so turns are not re-embedded."""
        self.events, self.lineage, self.vectors = events, lineage, vectors

    def of_events(self, tenant: str, ids: Iterable[str]) -> tuple[list[StateItem], int]:
        """Items of the events ``ids``, and how many asserted facts among them had no session."""
        wanted = sorted(set(ids))
        facts, unplaced = self._facts(tenant, wanted, self._envelopes(tenant, wanted))
        return self._turns(tenant, "event_id", wanted) + facts, unplaced

    def of_sessions(self, tenant: str, sessions: Iterable[str]) -> list[StateItem]:
        """Every item the stores hold for ``sessions`` of ``tenant``."""
        names = sorted(set(sessions))
        envelopes = {e.subject.event_id: e for name in names
                     for e in self._scoped(tenant, ForgetScope(type="session", session=name))}
        return self._turns(tenant, "session", names) + self._facts(tenant, sorted(envelopes),
                                                                    envelopes)[0]

    def sessions_of(self, tenant: str, ids: Iterable[str]) -> set[str]:
        """The sessions of the events ``ids`` (records, else the log's envelopes)."""
        wanted = sorted(set(ids))
        table = self.events().query("SELECT DISTINCT session FROM records WHERE tenant = ? "
                      "AND event_id IN (SELECT unnest(?))", [tenant, wanted])
        found = {s for s in table.column(0).to_pylist() if s is not None}
        return found | {s for e in self._envelopes(tenant, wanted).values()
                        if (s := e.subject.session) is not None}

    def _envelopes(self, tenant: str, ids: Sequence[str]) -> dict[str, LogEntry]:
        return {} if self.lineage is None else self.lineage.of_events(tenant, ids)

    def _scoped(self, tenant: str, scope: ForgetScope) -> list[LogEntry]:
        return [] if self.lineage is None else self.lineage.scoped(tenant, scope)

    def _turns(self, tenant: str, column: str, values: Sequence[str]) -> list[StateItem]:
        if not values:
            return []
        rows = arrow._dicts(self.events().query((
            'SELECT event_id, session, "partition", "offset", tt, text FROM records '
            f"WHERE tenant = ? AND text IS NOT NULL AND {column} IN (SELECT unnest(?))"),
            [tenant, list(values)]))
        stored = self._stored_vectors([r["event_id"] for r in rows])
        return [StateItem(r["event_id"], tenant, r["session"], r["partition"], r["offset"],
                          r["tt"].timestamp(), texts, stored.get(r["event_id"]))
                for r in rows if (texts := turn_texts(r["text"])) is not None]

    def _stored_vectors(self, ids: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        if self.vectors is None:
            return {}
        table = self.vectors().lance_table
        out: dict[str, npt.NDArray[np.float32]] = {}
        for start in range(0, len(ids), 500):  # keeps the filter's IN list short
            chunk = list(ids[start:start + 500])
            found = table.search().where(id_filter(chunk)).select(["event_id", "vector"]) \
                .limit(len(chunk)).to_arrow()
            out |= {i: np.asarray(v, dtype=np.float32) for i, v in zip(
                found.column("event_id").to_pylist(), found.column("vector").to_pylist(),
                strict=True)}
        return out

    def _facts(self, tenant: str, ids: Sequence[str],
               envelopes: Mapping[str, LogEntry]) -> tuple[list[StateItem], int]:
        if not ids:
            return [], 0
        entries = arrow.to_entries(self.events().query((
            "SELECT * FROM fact_entries WHERE tenant = ? AND op = 'assert' "
            "AND event_id IN (SELECT unnest(?))"), [tenant, list(ids)]))
        items, unplaced = [], 0
        for e in entries:
            where = envelopes.get(e.event_id)
            if where is None or where.subject.session is None or e.object is None:
                unplaced += 1
                continue
            items.append(StateItem(e.event_id, tenant, where.subject.session, e.tt.partition,
                                   e.tt.offset, e.tt.log_time.timestamp(),
                                   fact_texts(e.subject, e.relation, e.object)))
        return items, unplaced


class SessionStateForgetStore:
    """:class:`~memstack.pipelines.forgetting.contract.Forgettable` over one worker's session
    states (a :class:`SessionStateUpdater` and its changelog); ``run`` runs the updater's
    coroutines on the loop that owns its sink (``asyncio.run`` outside a worker)."""

    forgets_first = True
    """Reads the forgotten rows from the stores, so it runs before they erase them."""

    def __init__(self, updater: SessionStateUpdater, items: StoreItems, *,
                 run: Run = asyncio.run, tolerance: float = RESIDUAL_TOLERANCE) -> None:
        self.updater, self.items, self.run, self.tolerance = updater, items, run, tolerance

    @property
    def name(self) -> str:
        return NAME

    def forget(self, targets: Tombstones) -> ForgetReport:
        """:meth:`forget_all` of one request."""
        return self.forget_all([targets])[0]

    def forget_all(self, batch: Sequence[Tombstones]) -> list[ForgetReport]:
        """Forget each request of ``batch`` in order, as if the stores had erased the ones
        before it: the stores still hold their rows until the batch's erase, and those rows
        must not count as items a later request keeps (the latest kept item sets a session's
        read time)."""
        before: set[str] = set()
        reports = []
        for targets in batch:
            before |= targets.event_ids
            reports.append(self._forget(targets, frozenset(before)))
        return reports

    def _forget(self, targets: Tombstones, gone_ids: frozenset[str]) -> ForgetReport:
        began = time.monotonic()
        tenant = targets.request.tenant
        gone, unplaced = self.items.of_events(tenant, targets.event_ids)
        kept = [i for i in self.items.of_sessions(tenant, {i.session for i in gone})
                if i.event_id not in gone_ids]
        if unplaced:
            log.warning("session state: %d forgotten fact(s) of %s have no session in the "
                        "log; their terms cannot be removed (the audit will show them)",
                        unplaced, targets.request.describe())
        pos = targets.request.position
        plan = self.updater.removal(gone, (pos.partition, pos.offset), kept)
        self.updater.warm_items(plan.items + plan.refill_items)  # here, not on the sink's loop
        self.run(self.updater.apply_removal(plan))
        log.info("session state forgot %d term(s) in %d session(s), dropped %d session(s)",
                 plan.terms, len(plan.subtract), len(plan.drop))
        return ForgetReport(NAME, {"terms": plan.terms, "sessions": len(plan.drop)},
                            {"s": time.monotonic() - began, "unplaced_facts": float(unplaced)})

    def residuals(self, probe: AuditProbe) -> list[Residual]:
        tenant = probe.request.tenant
        live: dict[str, SessionSums] = {}
        held: set[str] = set()
        for session in self.items.sessions_of(tenant, probe.event_ids):
            state = self.updater.state(session_key(tenant, session))
            if state is not None and any(state.counts):
                live[session_key(tenant, session)] = state
                held.add(session)
        if not live:
            return []
        kept = [i for i in self.items.of_sessions(tenant, held)
                if i.event_id not in probe.event_ids and applied(i, live[i.key].marks)]
        self.updater.warm_items(kept)
        rebuilt = self.updater.recompute(kept)
        wrong = sum(divergence(state, rebuilt.get(key)) > self.tolerance
                    for key, state in live.items())
        if not wrong:
            return []
        return [Residual(NAME, "terms", wrong, "session states that differ from a "
                         f"recomputation without the forgotten events (> {self.tolerance:g})")]


RING_BIT_TOLERANCE = 1e-3
"""Share of code bits two rings of the same turns may differ in: a rotated coordinate within
float noise of zero (a turn embedded in another batch) flips its sign bit, ~1e-5 of bits."""


def divergence(state: SessionSums, want: SessionSums | None,
               heads: Iterable[int] = range(N_HEADS)) -> float:
    """The largest relative difference per head of two states' sums decayed to one log time;
    ``inf`` when their item counts differ, or their code rings hold other turns (or differ in
    more than ``RING_BIT_TOLERANCE`` of their bits)."""
    if want is None or want.counts != state.counts or not _same_ring(state, want):
        return math.inf
    at = max(state.last_time, want.last_time)
    got, ref = state.sums_at(at), want.sums_at(at)
    worst = 0.0
    for head in heads:
        diff, norm = float((got[head] - ref[head]).norm()), float(ref[head].norm())
        worst = max(worst, diff / norm if norm > 0 else (math.inf if diff > 0 else 0.0))
    return worst


def _same_ring(a: SessionSums, b: SessionSums) -> bool:
    if a.ring is None or b.ring is None:
        return a.ring is None and b.ring is None
    if a.ring.config != b.ring.config or not np.array_equal(a.ring.offsets, b.ring.offsets):
        return False
    if not a.ring.items:
        return True
    flipped = int(np.unpackbits(a.ring.codes ^ b.ring.codes).sum())
    return flipped <= RING_BIT_TOLERANCE * a.ring.items * a.ring.config.bits


StateStoreFor = Callable[[ForgetStores, Lineage | None], SessionStateForgetStore]
"""Builds the state's store for one forget, over the stores being forgotten in."""


def state_store_for(updater: SessionStateUpdater, run: Run = asyncio.run) -> StateStoreFor:
    """The state store of ``updater`` for one forget, over the stores being forgotten in (its
    turn vectors from LanceDB); ``run``: see :class:`SessionStateForgetStore`."""
    def build(stores: ForgetStores, lineage: Lineage | None) -> SessionStateForgetStore:
        items = StoreItems(lambda: stores.duckdb.index, lineage, lambda: stores.lance.index)
        return SessionStateForgetStore(updater, items, run=run)
    return build


@contextmanager
def changelog_forgetting(bootstrap: str, topic: str, encoder: Encoder
                         ) -> Iterator[StateStoreFor | None]:
    """The session states kept in changelog ``topic``, for forgetting offline (``memstack
    forget apply``, no worker running): the latest snapshots are read once, removals and
    tombstones are written back (a worker recovers its table from them). None when the topic
    does not exist (no worker ever kept session state)."""
    from memstack.infra.topics import describe_topics

    if not describe_topics(bootstrap, [topic])[0].exists:
        yield None
        return
    sink = KafkaSink(bootstrap, topic, latest_snapshots(bootstrap, topic))
    try:
        yield state_store_for(SessionStateUpdater(sink, sink, encoder))
    finally:
        sink.close()


@lru_cache(maxsize=4)
def _sketch(dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(20_260_301)
    return (torch.randn(dim + 1, SKETCH, generator=gen, dtype=torch.float64),
            torch.randn(2 * dim + 1, SKETCH, generator=gen, dtype=torch.float64))


def content_hash(states: Mapping[str, SessionSums], tolerance: float = HASH_TOLERANCE) -> str:
    """A hash of what session states hold, for comparisons with a clean build.

    Per non-empty session (sorted keys): the key, the item counts per head, the last log time
    (µs) and a sketch of the sums decayed to it, ``Aᵀ M_h B`` for fixed Gaussian ``A``
    ((d+1) × 8) and ``B`` ((2d+1) × 8): 64 numbers per head, rounded to multiples of
    ``tolerance`` (absolute; the sums' entries are O(1) to O(items)). Gaussian directions miss no
    difference of the sums, and float rounding (~1e-15) flips a rounded coordinate with
    probability ~1e-9, where rounding all ~66k entries per session would flip one in ~1e-4 of
    comparisons. Marks and the reference time are bookkeeping and left out. A code ring adds
    the offsets of the turns it holds (its codes can differ in a bit or two between builds whose
    embeddings differ by float noise; :func:`divergence` compares them with a tolerance).
    """
    digest = hashlib.sha256()
    for key in sorted(states):
        state = states[key]
        if not any(state.counts):
            continue  # an empty state holds nothing (and a forget drops it)
        left, right = _sketch(state.config.dim)
        sums = state.sums_at().to(torch.float64)
        sketch = torch.einsum("ia,hij,jb->hab", left, sums, right)
        digest.update(f"{key}|{state.counts}|{round(state.last_time * 1e6)}|".encode())
        digest.update(torch.round(sketch / tolerance).to(torch.int64).numpy().tobytes())
        if state.ring is not None:  # which turns it holds; codes differ by float noise
            digest.update(state.ring.offsets.astype("<i8").tobytes())
    return digest.hexdigest()
