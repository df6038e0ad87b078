"""Reading the session state: ``reader.session_state(tenant, session).read(query_text, k)``.

The durable state is fixed-size (sums and a code ring, see docs/session-state.md):

- TURNS head: the code ring decodes by itself to the log offsets of the best turns, named by
  the session's records at those offsets. A state without a ring (snapshotted before rings)
  decodes the sums against candidate values from the stores: the session's text records
  (DuckDB) with their stored MiniLM vectors (LanceDB ``vectors_of``), projected like the
  state's values;
- FACTS head (key = embed("subject relation"), value = embed(object)): the tenant's current
  facts; their objects are embedded with the encoder (cached per object text).

Snapshots come from a :class:`SnapshotSource`: the live updater itself, a dict, or the latest
value per key of the changelog topic (:meth:`SessionStateReader.from_changelog`).
:class:`SessionStateSource` is the :class:`~memstack.view.context.ContextSource` that puts the
read-out into ``context(...)``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch
from pydantic import BaseModel

from memstack.operators.session_state import _projection, codes, read_matrix, score_values
from memstack.operators.session_state.arena import SessionSums
from memstack.operators.session_state.codec import restore_sums
from memstack.operators.session_state.keys import Head, project
from memstack.pipelines.session_state.table import SnapshotSource, latest_snapshots, session_key
from memstack.view.types import ContextItem

if TYPE_CHECKING:
    from memstack.pipelines.embedding import Encoder
    from memstack.pipelines.stores.bundle import Stores
    from memstack.view.context import ContextRequest
    from memstack.view.memory_view import AsOfView

log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class StateHit:
    """One decoded item of a state read: the stored event, its text, head and cosine score."""

    event_id: str
    text: str
    head: Head
    score: float
    known_at: datetime | None = None


class DictSource:
    """Snapshots held in a mapping (tests, a local snapshot file loaded whole)."""

    def __init__(self, snapshots: Mapping[str, bytes]) -> None:
        self.snapshots = snapshots

    def get(self, key: str) -> bytes | None:
        return self.snapshots.get(key)


class SessionStateReader:
    """Reads session states of one deployment, decoding against the stores' values."""

    def __init__(self, stores: Stores, encoder: Encoder, source: SnapshotSource) -> None:
        self.stores, self.encoder, self.source = stores, encoder, source
        self._objects: dict[str, F64] = {}

    @classmethod
    def from_changelog(cls, stores: Stores, encoder: Encoder, bootstrap: str,
                       topic: str) -> SessionStateReader:
        """A reader over the changelog's latest snapshots (read once, now)."""
        return cls(stores, encoder, DictSource(latest_snapshots(bootstrap, topic)))

    def session_state(self, tenant: str, session: str) -> SessionStateView:
        data = self.source.get(session_key(tenant, session))
        state = None if data is None else restore_sums(data)
        return SessionStateView(self, tenant, session, state)

    def object_vectors(self, objects: Sequence[str]) -> F64:
        missing = sorted({o for o in objects if o not in self._objects})
        if missing:
            for text, vec in zip(missing, self.encoder.encode(missing), strict=True):
                self._objects[text] = np.asarray(vec, dtype=np.float64)
        return np.stack([self._objects[o] for o in objects])


class SessionStateView:
    """One session's state; ``read`` returns decoded hits, best first."""

    def __init__(self, reader: SessionStateReader, tenant: str, session: str,
                 state: SessionSums | None) -> None:
        self.reader, self.tenant, self.session, self.state = reader, tenant, session, state

    def read(self, query_text: str, k: int = 5, heads: Sequence[Head] = tuple(Head),
             at: datetime | None = None) -> list[StateHit]:
        """The ``k`` best decoded items over ``heads`` for ``query_text`` (read at ``at``)."""
        if self.state is None or k < 1:
            return []
        cfg = self.state.config
        proj = _projection(cfg.seed, cfg.dim, cfg.torch_dtype)
        q_vec = np.asarray(self.reader.encoder.encode([query_text])[0], dtype=np.float64)
        query = project(torch.from_numpy(q_vec)[None], proj)
        sums = self.state.sums_at(None if at is None else at.astimezone(UTC).timestamp())
        hits: list[StateHit] = []
        for head in heads:
            if self.state.counts[int(head)] == 0:
                continue
            if head == Head.TURNS and self.state.ring is not None:
                hits += self._ring_hits(q_vec, k)
                continue
            cands = self._candidates(head)
            if not cands:
                continue
            values = project(torch.from_numpy(np.stack([v for _, v in cands])), proj)
            out, mean_v = read_matrix(cfg, sums[int(head)], query)
            scores = score_values(out, mean_v, values)[0]
            hits += [StateHit(c.event_id, c.text, head, float(s), c.known_at)
                     for (c, _), s in zip(cands, scores.tolist(), strict=True)
                     if math.isfinite(s)]
        return sorted(hits, key=lambda h: -h.score)[:k]

    def _ring_hits(self, query: F64, k: int) -> list[StateHit]:
        """The TURNS head from the code ring: the best codes' offsets, named by the session's
        records at those log offsets (no vector is fetched: the ring decodes by itself)."""
        assert self.state is not None and self.state.ring is not None
        best = dict(codes.read(self.state.ring, query, k))
        if not best:
            return []
        rows = self.reader.stores.events.records(self.tenant, session=self.session)
        return [StateHit(r.event_id, r.text or "", Head.TURNS, best[r.offset], r.tt)
                for r in rows if r.offset in best and r.text]

    def _candidates(self, head: Head) -> list[tuple[StateHit, F64]]:
        stores = self.reader.stores
        if head == Head.TURNS:
            rows = [r for r in stores.events.records(self.tenant, session=self.session) if r.text]
            if not rows:
                return []
            vectors = stores.vectors.vectors_of([r.event_id for r in rows])
            return [(StateHit(r.event_id, r.text or "", head, 0.0, r.tt),
                     np.asarray(v, dtype=np.float64)) for r, v in zip(rows, vectors, strict=True)]
        facts = stores.events.facts_as_of(self.tenant)
        if not facts:
            return []
        vecs = self.reader.object_vectors([f.object for f in facts])
        return [(StateHit(f.source_event_id, f"{f.subject} {f.relation} {f.object}", head, 0.0,
                          f.tt_from), v) for f, v in zip(facts, vecs, strict=True)]


class SessionStateInfo(BaseModel):
    """What one session's state holds and weighs (the inspector's session panel)."""

    tenant: str
    session: str
    bytes: int
    """The snapshot's size: everything the state holds, header included."""
    items: dict[str, int]
    """Items added per head (``facts``, ``turns``), forgotten ones subtracted."""
    ring_turns: int
    """Turns its code ring holds (0 without a ring)."""
    ring_capacity: int
    ring_bits: int
    ring_salient_slots: int
    last_time: datetime | None
    """The log time of its latest item."""


def state_info(tenant: str, session: str, data: bytes) -> SessionStateInfo:
    """:class:`SessionStateInfo` of a snapshot."""
    state = restore_sums(data)
    ring = state.ring
    return SessionStateInfo(
        tenant=tenant, session=session, bytes=len(data),
        items={h.name.lower(): int(state.counts[int(h)]) for h in Head},
        ring_turns=0 if ring is None else ring.items,
        ring_capacity=0 if ring is None else ring.config.capacity,
        ring_bits=0 if ring is None else ring.config.bits,
        ring_salient_slots=0 if ring is None else ring.config.salient_slots,
        last_time=(datetime.fromtimestamp(state.last_time, UTC)
                   if math.isfinite(state.last_time) else None))


@dataclass(frozen=True)
class SessionStateSource:
    """The session state's read-out as a :class:`~memstack.view.context.ContextSource`."""

    reader: SessionStateReader
    k: int = 8
    name: str = "state"
    title: str = "Session memory (recurrent state)"
    share: float = 0.15

    def gather(self, view: AsOfView, request: ContextRequest) -> Sequence[ContextItem]:
        if request.session is None:
            return []
        hits = self.reader.session_state(view.tenant, request.session).read(request.query,
                                                                           self.k)
        return [ContextItem(self.name, h.text, 0, h.event_id, request.session, None, h.known_at,
                            h.score) for h in hits]
