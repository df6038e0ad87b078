"""LoCoMo (snap-research, CC BY-NC 4.0, evaluation only) and its audit errata, as typed values.

The data is read from the shared evaluation folder, never copied into the repository:
``$MEMSTACK_EVAL_DIR`` if set, else ``<repo>/../shared/eval`` (where CI and this workspace keep
it). Turn times come from the session dates (``"1:56 pm on 8 May, 2023"``, taken as UTC), one
turn every :data:`TURN_SPACING` after the session start.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from memstack.foundation.errors import MemstackError

if TYPE_CHECKING:
    from memstack.pipelines.embedding import Encoder
    from memstack.pipelines.stores.base import Vectors

EVAL_DIR_ENV = "MEMSTACK_EVAL_DIR"
TURN_SPACING = timedelta(seconds=30)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_EVIDENCE = re.compile(r"D(\d+):(\d+)")


class EvalDataMissingError(MemstackError):
    """The LoCoMo files are not where expected. Set MEMSTACK_EVAL_DIR to the folder holding
    ``locomo/locomo10.json`` and ``locomo-audit/errors.json``."""


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    at: datetime


@dataclass(frozen=True)
class Observation:
    speaker: str
    text: str
    evidence: tuple[str, ...]
    at: datetime


@dataclass(frozen=True)
class Question:
    qid: str
    question: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: tuple[Turn, ...]
    observations: tuple[Observation, ...]
    questions: tuple[Question, ...]


def eval_dir() -> Path:
    override = os.environ.get(EVAL_DIR_ENV)
    root = Path(__file__).resolve().parents[2]
    path = Path(override) if override else root.parent / "shared" / "eval"
    if not (path / "locomo" / "locomo10.json").exists():
        raise EvalDataMissingError(f"no locomo/locomo10.json under {path}; set {EVAL_DIR_ENV}")
    return path


def evidence_ids(raw: list[Any]) -> tuple[str, ...]:
    """Normalised ``D<session>:<turn>`` ids (leading zeros and odd separators tolerated)."""
    found = [f"D{int(s)}:{int(t)}" for item in raw for s, t in _EVIDENCE.findall(str(item))]
    return tuple(dict.fromkeys(found))


def session_time(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` -> 2023-05-08T13:56Z."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _sessions(conv: dict[str, Any]) -> Iterator[tuple[int, datetime, list[dict[str, Any]]]]:
    numbers = sorted(int(k.split("_")[1]) for k in conv
                     if re.fullmatch(r"session_\d+", k) and conv[k])
    for n in numbers:
        yield n, session_time(conv[f"session_{n}_date_time"]), conv[f"session_{n}"]


def turn_text(speaker: str, raw: dict[str, Any]) -> str:
    text = f"{speaker}: {raw.get('text', '')}"
    if raw.get("blip_caption"):
        text += f" [shares an image: {raw['blip_caption']}]"
    return text


def parse(index: int, raw: dict[str, Any]) -> Conversation:
    conv = raw["conversation"]
    turns: list[Turn] = []
    starts: dict[int, datetime] = {}
    for n, start, items in _sessions(conv):
        starts[n] = start
        for i, item in enumerate(items):
            turns.append(Turn(str(item["dia_id"]), item["speaker"],
                              turn_text(item["speaker"], item), start + i * TURN_SPACING))
    observations = [
        Observation(speaker, str(text), evidence_ids([ev]), starts[int(key.split("_")[1])])
        for key, by_speaker in raw.get("observation", {}).items()
        if int(key.split("_")[1]) in starts
        for speaker, items in by_speaker.items() for text, ev in items
    ]
    questions = [Question(f"locomo_{index}_qa{i}", q["question"], evidence_ids(q.get("evidence",
                          [])), int(q["category"])) for i, q in enumerate(raw["qa"])]
    return Conversation(raw["sample_id"], (conv["speaker_a"], conv["speaker_b"]), tuple(turns),
                        tuple(observations), tuple(questions))


def load(limit: int | None = None) -> list[Conversation]:
    path = eval_dir() / "locomo" / "locomo10.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    return [parse(i, c) for i, c in enumerate(data[:limit])]


@dataclass(frozen=True)
class Erratum:
    qid: str
    question: str
    error_type: str
    correct_evidence: tuple[str, ...]


def errata() -> dict[str, Erratum]:
    """The audit's known-wrong gold answers, by question id (``locomo_<conv>_qa<index>``)."""
    path = eval_dir() / "locomo-audit" / "errors.json"
    if not path.exists():
        raise EvalDataMissingError(f"no {path}; set {EVAL_DIR_ENV}")
    items = json.loads(path.read_text(encoding="utf-8"))
    return {e["question_id"]: Erratum(e["question_id"], e["question"], e["error_type"],
                                      evidence_ids(e.get("correct_evidence") or []))
            for e in items}


def corrected(question: Question, found: dict[str, Erratum]) -> Question:
    """The question with the audit's corrected evidence (when it gives any)."""
    erratum = found.get(question.qid)
    if erratum is None or not erratum.correct_evidence:
        return question
    if erratum.question.strip() != question.question.strip():
        raise ValueError(f"erratum {question.qid} is about {erratum.question!r}, the data has "
                         f"{question.question!r}; the audit does not match this data version")
    return replace(question, evidence=erratum.correct_evidence)


class CachedEncoder:
    """An encoder that answers primed texts from memory (questions are encoded in one batch)."""

    def __init__(self, base: Encoder) -> None:
        self.base = base
        self._cache: dict[str, Vectors] = {}

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def dim(self) -> int:
        return self.base.dim

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The distinct texts not cached yet, sorted (the batch :meth:`prime` encodes)."""
        return sorted({t for t in texts if t not in self._cache})

    def prime(self, texts: Sequence[str]) -> None:
        todo = self.missing(texts)
        if todo:
            for text, vector in zip(todo, self.base.encode(todo), strict=True):
                self._cache[text] = np.asarray(vector, dtype=np.float32)

    def encode(self, texts: Sequence[str]) -> Vectors:
        self.prime(texts)
        out: Vectors = np.stack([self._cache[t] for t in texts]).astype(np.float32)
        return out
