"""LoCoMo as streams for ``memstack eval openproblems``: turns in order, embedded once.

Each conversation is one stream (one session): its turns in session order with their log times
(the session dates, :mod:`memstack.jobs.eval.locomo_data`), its observations (LLM-written
session notes citing their turns) and its questions with evidence. Texts are embedded with the
real encoder (MiniLM) through a text -> vector cache in ``out/cache/`` so a rerun embeds nothing.
The evidence labels are the dataset's: they are the only truth the oracles use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memstack.jobs.eval.locomo_data import CachedEncoder, Conversation, Question, load
from memstack.jobs.measure import Report
from memstack.pipelines.embedding import Encoder

log = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
CACHE = Path("out") / "cache" / "openproblems-embeddings.npz"
TUNE_CONVERSATIONS = 2
"""The first conversations are where settings were chosen (item 5); figures are reported on
the others separately (``_heldout``) so no choice is judged on the data it was tuned on."""


@dataclass(frozen=True)
class Asked:
    """A question with evidence, as positions of the stream's turns."""

    question: Question
    evidence: tuple[int, ...]
    vector: F32

    @property
    def last(self) -> int:
        return max(self.evidence)


@dataclass(frozen=True)
class Stream:
    """One conversation as a stream of turns, embedded."""

    conversation: Conversation
    texts: tuple[str, ...]
    times: tuple[float, ...]
    vectors: F32  # (turns, 384), unit rows
    asked: tuple[Asked, ...]
    notes: tuple[str, ...]
    note_turns: tuple[tuple[int, ...], ...]
    note_vectors: F32

    @property
    def name(self) -> str:
        return self.conversation.sample_id

    def __len__(self) -> int:
        return len(self.texts)


class CachedVectors(CachedEncoder):
    """Text -> unit vector, from the cache file or the encoder (then saved)."""

    def __init__(self, encoder: Encoder, path: Path = CACHE) -> None:
        super().__init__(encoder)
        self.path = path
        if path.exists():
            with np.load(path, allow_pickle=False) as saved:
                self._cache = dict(zip(saved["texts"].tolist(), saved["vecs"], strict=True))

    def encode(self, texts: Sequence[str]) -> F32:
        """The :class:`Encoder` protocol: cached vectors, new texts embedded (not saved)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return super().encode(texts)

    def embed(self, texts: Sequence[str], report: Report) -> F32:
        missing = self.missing(texts)
        report("embeddings: %d texts, %d cached, %d to embed", len(set(texts)),
               len(set(texts)) - len(missing), len(missing))
        if missing:
            started = time.monotonic()
            self.prime(missing)
            report("embedded %d texts in %.1f s", len(missing), time.monotonic() - started)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(self.path, texts=np.array(list(self._cache)),
                     vecs=np.stack(list(self._cache.values())))
        return self.encode(texts)


def stream_of(conv: Conversation, vectors: CachedVectors, report: Report) -> Stream:
    """The conversation's turns in order; questions whose evidence names no turn are dropped."""
    position = {t.dia_id: i for i, t in enumerate(conv.turns)}
    questions = []
    for q in conv.questions:
        found = tuple(sorted({position[e] for e in q.evidence if e in position}))
        if found:
            questions.append((q, found))
    notes = [(o.text, tuple(sorted({position[e] for e in o.evidence if e in position})))
             for o in conv.observations]
    notes = [(text, turns) for text, turns in notes if turns]
    texts = [t.text for t in conv.turns]
    everything = vectors.embed(texts + [q.question for q, _ in questions]
                               + [n for n, _ in notes], report)
    n_t, n_q = len(texts), len(questions)
    return Stream(
        conv, tuple(texts), tuple(t.at.timestamp() for t in conv.turns), everything[:n_t],
        tuple(Asked(q, ev, everything[n_t + i]) for i, (q, ev) in enumerate(questions)),
        tuple(n for n, _ in notes), tuple(t for _, t in notes), everything[n_t + n_q:])


def streams(quick: bool, cache: CachedVectors, report: Report) -> list[Stream]:
    convs = load(TUNE_CONVERSATIONS if quick else None)
    return [stream_of(c, cache, report) for c in convs]


def recall_at(ranked: Sequence[int], evidence: Sequence[int], k: int) -> float:
    """|evidence among the first k| / |evidence| (the oracle: dataset labels only)."""
    wanted = set(evidence)
    if not wanted:
        raise ValueError("recall of a question without evidence is undefined")
    return len(wanted & set(ranked[:k])) / len(wanted)
