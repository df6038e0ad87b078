"""Distillation from the external memory: the stores are the teacher of the weights.

:class:`StoreTeacher` answers a fact cue ``(subject, relation)`` with what memory says *now*:
the embedding of the current object (a single-valued relation), or the softmax-weighted mix of
the top-k current objects by similarity to the cue (several current objects: a multi-valued
relation). :class:`Distiller` turns feed items into feed records: cue vectors from the encoder,
targets from the teacher (the item's own object when memory has no current answer, e.g. a value
whose valid time starts later).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime

import numpy as np
import torch

from memstack.operators.consolidation import FactCue, UnknownCueError, softmax_mix
from memstack.pipelines.consolidation.feed import FeedItem, FeedRecord, Vector
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.stores.base import EventIndex

log = logging.getLogger(__name__)

REFERENCE_CUES = tuple(
    f"{who} {rel}"
    for who in ("user:ana", "user:bob", "the customer", "project apollo", "Maria Lopez",
                "account 4411", "the team", "Dr. Chen")
    for rel in ("lives_in", "works_for", "likes", "prefers", "speaks", "status", "owner",
                "deadline")
)
"""A fixed corpus of generic fact cues: its mean embedding centres the learners' features."""


def reference_centre(encoder: Encoder) -> torch.Tensor:
    """The centring vector of the learners: the mean embedding of :data:`REFERENCE_CUES`."""
    vectors = encoder.encode(list(REFERENCE_CUES))
    return torch.from_numpy(vectors).to(torch.float64).mean(dim=0)


class StoreTeacher:
    """The teacher protocol over the event index (``stores.events``), for one tenant
    (``for_tenant``), as of now."""

    def __init__(self, events: EventIndex, encoder: Encoder, *, tenant: str = "", k: int = 4,
                 temperature: float = 0.05, cache_size: int = 50_000) -> None:
        self.events, self.encoder, self.tenant = events, encoder, tenant
        self.k, self.temperature = k, temperature
        self._cache: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._cache_size = cache_size

    def for_tenant(self, tenant: str) -> StoreTeacher:
        other = StoreTeacher(self.events, self.encoder, tenant=tenant, k=self.k,
                             temperature=self.temperature, cache_size=self._cache_size)
        other._cache = self._cache  # embeddings of object texts are tenant-free
        return other

    def objects(self, cues: Sequence[FactCue], at: datetime | None = None) -> list[list[str]]:
        """Each cue's current objects (valid and known at ``at``, default now): one query
        for all the cues' subjects (the live worker asks once per batch)."""
        subjects = sorted({cue.subject for cue in cues})
        found: dict[tuple[str, str], set[str]] = {}
        for row in self.events.facts_as_of_subjects(self.tenant, subjects, valid=at, known=at):
            found.setdefault((row.subject, row.relation), set()).add(row.object)
        return [sorted(found.get((cue.subject, cue.relation), ())) for cue in cues]

    def targets(self, cues: Sequence[FactCue]) -> torch.Tensor:
        """``[n, 384]`` float32; raises :class:`UnknownCueError` for a cue memory cannot answer."""
        answers = self.objects(cues)
        empty = [c for c, a in zip(cues, answers, strict=True) if not a]
        if empty:
            raise UnknownCueError(f"{len(empty)} cue(s) have no current fact: {empty[0]}")
        return self.answer(cues, answers)

    def answer(self, cues: Sequence[FactCue], answers: Sequence[Sequence[str]]) -> torch.Tensor:
        """The targets for given current objects per cue (one: its embedding; more: a mix)."""
        out = torch.zeros(len(cues), self.encoder.dim, dtype=torch.float32)
        multi = [i for i, a in enumerate(answers) if len(a) > 1]
        cue_vecs = self.embed([cues[i].text() for i in multi]) if multi else None
        for i, objects in enumerate(answers):
            values = self.embed(list(objects))
            if len(objects) == 1:
                out[i] = values[0]
                continue
            assert cue_vecs is not None
            scores = (cue_vecs[multi.index(i)][None, :] @ values.T).to(torch.float64)
            out[i] = softmax_mix(scores, values.to(torch.float64), self.k,
                                 self.temperature)[0].to(torch.float32)
        return out

    def embed(self, texts: list[str]) -> torch.Tensor:
        """Embeddings of ``texts`` through an LRU cache.

        Each text is encoded alone: a transformer's output depends slightly (~1e-7) on the
        other texts padded into its batch, and a text's vector must not, so that a replay, a
        backfill and a forget rewrite distil bit-identical items. Fact texts are short and few.
        """
        new = sorted({t for t in texts if t not in self._cache})
        for text in new:
            vec = self.encoder.encode([text])[0]
            self._cache[text] = torch.from_numpy(np.array(vec, dtype=np.float32))
        if new:
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        for t in texts:
            self._cache.move_to_end(t)
        return torch.stack([self._cache[t] for t in texts])


class Distiller:
    """Feed items -> feed records: cues embedded, targets from the teacher (per tenant)."""

    def __init__(self, teacher: StoreTeacher) -> None:
        self.teacher = teacher

    def records(self, items: Sequence[FeedItem]) -> list[FeedRecord]:
        writes = [i for i in items if i.op == "write"]
        vectors = self._vectors(writes)
        out: list[FeedRecord] = []
        for item in items:
            if item.op == "remove":
                out.append(FeedRecord.removal(item))
                continue
            cue, target = vectors[item.item_id]
            out.append(FeedRecord("write", item.item_id, item.shard, item.log_time,
                                  item.source_event_id, cue, target))
        return out

    def _vectors(self, writes: Sequence[FeedItem]) -> dict[str, tuple[Vector, Vector]]:
        if not writes:
            return {}
        cues = self.teacher.embed([w.cue.text() for w in writes]).numpy()
        targets = np.zeros_like(cues)
        by_tenant: dict[str, list[int]] = {}
        for i, w in enumerate(writes):
            by_tenant.setdefault(w.tenant or "", []).append(i)
        for tenant, rows in by_tenant.items():
            teacher = self.teacher.for_tenant(tenant)
            wanted = [writes[i].cue for i in rows]
            answers = teacher.objects(wanted)
            answers = [a or [writes[i].object or ""] for a, i in zip(answers, rows, strict=True)]
            targets[rows] = teacher.answer(wanted, answers).numpy()
        return {w.item_id: (cues[i], targets[i]) for i, w in enumerate(writes)}
