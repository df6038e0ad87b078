"""Closed-book recall: the consolidated weights answer a fact cue, as of a known time.

``RecallReader(root, stores.events, encoder).recall(tenant, "user:ana lives_in", known=t)``
loads the checkpoint of the cue's shard as memory knew it at ``t`` (the newest one whose
learners applied nothing logged after ``t``), predicts ``W φ(cue)`` and decodes it as the
nearest *known value*: the candidates are the objects the stores have ever known for that
relation in the tenant (up to ``t``). The answer carries the learner's confidence (softmax of
cosines at the learner's temperature), cosine and margin. No index is scanned for the answer
itself: the stores only give the candidate set and the cue's relation.

``RecalledFacts`` is a :class:`memstack.view.ContextSource` (``name="recall"``) that adds the
confident closed-book answers for the request's subject to ``context(...)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from memstack.operators.consolidation import FactCue, RidgeLearner
from memstack.pipelines.consolidation.checkpoints import Manifest, all_groups
from memstack.pipelines.consolidation.feed import Sharding
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.view.errors import InvalidQueryError
from memstack.view.types import ContextItem

if TYPE_CHECKING:
    from memstack.view.context import ContextRequest
    from memstack.view.memory_view import AsOfView

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecallAnswer:
    """A closed-book answer; ``value`` is None when no weights hold the cue's shard."""

    tenant: str
    subject: str
    relation: str
    value: str | None
    confidence: float
    cosine: float
    margin: float
    candidates: int
    checkpoint: str | None


class RecallReader:
    """Reads consolidated weights from the checkpoints under ``root`` (the job's checkpoint
    root, ``<MEMSTACK_HOME>/consolidation/checkpoints``)."""

    def __init__(self, root: Path, events: DuckDBEventIndex, encoder: Encoder, *,
                 sharding: Sharding | None = None, device: str = "cpu") -> None:
        self.root = Path(root)
        self.events = events
        self.encoder = encoder
        self.sharding = sharding or Sharding()
        self.device = device
        self._learners: dict[tuple[str, str], RidgeLearner] = {}

    def parse(self, tenant: str, cue: str | FactCue) -> FactCue:
        """A cue object from ``"subject relation"``: the longest relation of the tenant that
        ends the text names the relation."""
        if isinstance(cue, FactCue):
            return cue
        text = cue.strip()
        relations = self.events.query("SELECT DISTINCT relation FROM fact_versions WHERE "
                          "tenant = ?", [tenant]).column(0).to_pylist()
        for relation in sorted(relations, key=len, reverse=True):
            if text.endswith(" " + relation) and text[: -len(relation) - 1].strip():
                return FactCue(text[: -len(relation) - 1].strip(), relation)
        raise InvalidQueryError(
            f"cue {cue!r} does not end with a relation known in tenant {tenant!r}; write it as "
            "'subject relation', e.g. 'user:ana lives_in'")

    def candidates(self, tenant: str, relation: str, known: datetime | None) -> list[str]:
        """Objects ever known for ``relation`` in the tenant (up to ``known``)."""
        sql = "SELECT DISTINCT object FROM fact_versions WHERE tenant = ? AND relation = ?"
        params: list[object] = [tenant, relation]
        if known is not None:
            sql += " AND tt_from <= ?"
            params.append(known)
        return sorted(self.events.query(sql + " ORDER BY object", params).column(0).to_pylist())

    def manifest(self, shard: str, known: datetime | None) -> Manifest | None:
        """The newest checkpoint of any actor group that holds ``shard`` as of ``known``."""
        at = None if known is None else known.timestamp()
        found = [m for g in all_groups(self.root) for m in g.manifests()
                 if shard in m.shards and (at is None or m.known <= at)]
        return max(found, key=lambda m: (m.known, sum(m.offsets.values())), default=None)

    def learner(self, manifest: Manifest, shard: str) -> RidgeLearner:
        key = (str(manifest.path), shard)
        if key not in self._learners:
            from memstack.operators.consolidation import checkpoint

            restored = checkpoint.load(manifest.path / manifest.shards[shard], self.device)
            self._learners = {key: restored.learner}  # keep one: checkpoints are large
        return self._learners[key]

    def recall(self, tenant: str, cue: str | FactCue,
               known: datetime | None = None) -> RecallAnswer:
        fact = self.parse(tenant, cue)
        shard = self.sharding.shard_of(tenant, fact.subject)
        manifest = self.manifest(shard, known)
        names = self.candidates(tenant, fact.relation, known)
        if manifest is None or not names:
            return RecallAnswer(tenant, fact.subject, fact.relation, None, 0.0, 0.0, 0.0,
                                len(names), None)
        learner = self.learner(manifest, shard)
        vectors = torch.from_numpy(self.encoder.encode([fact.text(), *names]))
        best = learner.recall(vectors[:1], vectors[1:], names)[0]
        return RecallAnswer(tenant, fact.subject, fact.relation, best.value_id, best.confidence,
                            best.cosine, best.margin, len(names), manifest.path.name)


@dataclass(frozen=True)
class RecalledFacts:
    """Context source: closed-book answers for the request's subject (confident ones only)."""

    reader: RecallReader
    min_confidence: float = 0.5
    name: str = "recall"
    title: str = "Recalled from consolidated memory"
    share: float = 0.1

    def gather(self, view: AsOfView, request: ContextRequest) -> Sequence[ContextItem]:
        if not request.subject:
            return []
        known = view.as_of.known_time
        relations = sorted({f.relation for f in view.history(request.subject)})
        items: list[ContextItem] = []
        for relation in relations:
            answer = self.reader.recall(view.tenant, FactCue(request.subject, relation), known)
            if answer.value is None or answer.confidence < self.min_confidence:
                continue
            text = (f"{answer.subject} {relation} {answer.value} "
                    f"(recalled, confidence {answer.confidence:.2f})")
            items.append(ContextItem(self.name, text, 0, None, None, None, None,
                                     answer.confidence))
        return items


LearnerOf = Callable[[str, str], "RidgeLearner | None"]
"""``(tenant, session) -> the learner holding that session's consolidated turns, or None``."""


@dataclass(frozen=True)
class RecalledTurns:
    """Context source: the session's turns the consolidated weights recall for the query.

    A closed-book read, ``W φ(query)``, decoded to the nearest of the session's stored turn
    vectors (LanceDB), centred on their mean (see docs/consolidation.md, "Measured on LoCoMo":
    centring the read-out is what lets it beat a plain cosine). Only for turns consolidated into
    a learner per session (``memstack eval openproblems`` does; the live feed consolidates
    facts only).
    """

    learner_of: LearnerOf
    encoder: Encoder
    k: int = 8
    kinds: tuple[str, ...] = ("message",)
    name: str = "weights"
    title: str = "Recalled from consolidated memory (turns)"
    share: float = 0.25
    """Chosen on two LoCoMo conversations (0.1 / 0.25 / 0.4 measured): docs/consolidation.md."""

    def gather(self, view: AsOfView, request: ContextRequest) -> Sequence[ContextItem]:
        if request.session is None:
            return []
        learner = self.learner_of(view.tenant, request.session)
        rows = [r for r in view.records(request.session) if r.text and r.kind in self.kinds]
        if learner is None or not rows:
            return []
        stored = view.memory.stores.vectors.vectors_of([r.event_id for r in rows])
        values = torch.from_numpy(np.asarray(stored, dtype=np.float64))
        query = torch.from_numpy(self.encoder.encode([request.query]))
        pred = learner.predict(query).cpu()
        mean = values.mean(dim=0)
        cands = torch.nn.functional.normalize(values - mean, dim=1)
        scores = (torch.nn.functional.normalize(pred - mean, dim=1) @ cands.T)[0]
        top = torch.topk(scores, min(self.k, len(rows))).indices.tolist()
        return [ContextItem(self.name, f"[{rows[i].kind}] {rows[i].text}", 0, rows[i].event_id,
                            rows[i].session, rows[i].occurred_at, rows[i].tt, float(scores[i]))
                for i in top]
