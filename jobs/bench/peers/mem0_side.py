"""Mem0's side of the peers bench: Mem0 open source, offline, in its best configuration here.

- ``Memory.add(messages, run_id=<conversation>, infer=False)``, one call per LoCoMo session
  (its batch form): every turn is stored as it is, no LLM (none is reachable; the LLM entry of
  the configuration points at a closed local port, so a call would fail at once, not leave).
- ``Memory.search(question, top_k=10, filters={"run_id": <conversation>}, threshold=0.0)``:
  Mem0's own ranking, semantic candidates (60) scored with its BM25 keyword leg.
- The vector store is its local Qdrant on disk (measured as fast as in memory here; Mem0's
  FAISS store fetches 2 x top_k over every conversation and filters after, losing turns, and
  has no keyword leg). The keyword leg is
  Qdrant's BM25 sparse vectors from fastembed's ``Bm25``; fastembed fetches the ``Qdrant/bm25``
  stopword files from the model hub, which is not reachable, so the same ``Bm25`` is built from
  a local folder with scikit-learn's English stopwords (a dependency of sentence-transformers)
  and handed to Mem0's Qdrant store before the first add. The keyword leg lifted recall@10 on
  2 conversations from 0.425 to 0.58 here. spaCy's model is a download too: no lemmas and no
  entity boosts (Mem0 falls back to the plain text, as it does without spaCy).
- Two embedders, the same all-MiniLM-L6-v2 weights (the packaged model folder):
  ``st``, Mem0's ``huggingface`` provider (sentence-transformers, torch fp32, 1 thread) on
  that folder; ``onnx``, a Mem0 embedder calling memstack's ``onnx-int8`` encoder
  (:class:`MemstackEmbedding`, registered with Mem0's embedder factory): 4.5x the ingest rate
  on the full run here, recall within 0.01.

Mem0 is an optional extra (``pip install 'memstack[peers]'``), never a dependency of memstack:
it is imported by name at run time only.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import itertools
import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memstack.foundation.errors import MemstackError
from memstack.jobs.bench.peers.sides import Hits, K, Side
from memstack.jobs.eval.locomo_data import Conversation, Turn
from memstack.jobs.measure import Report
from memstack.pipelines.embedding import make_encoder
from memstack.pipelines.encoder_model import MODEL_DIM, model_path

EMBEDDERS = ("st", "onnx")
"""Mem0's embedders measured: its sentence-transformers provider, and memstack's ONNX encoder."""
PROVIDER = "memstack_onnx"
"""The name :class:`MemstackEmbedding` is registered under in Mem0's embedder factory."""
ST_TORCH_THREADS = 1
"""torch threads of the ``st`` embedder (process-wide; Mem0 encodes one text per call): with 2
on this shared 2-core machine, one turn took 240-280 ms while other work ran, with 1 28-38 ms."""
CLOSED_PORT_URL = "http://127.0.0.1:9/v1"
THRESHOLD = 0.0
"""Mem0's semantic gate (default 0.1): at 0 no candidate is dropped before its scoring."""


class Mem0NotInstalledError(MemstackError):
    """Mem0 (or fastembed, its keyword leg) is not installed in this environment."""


def versions() -> dict[str, str]:
    """The installed versions of what the Mem0 side runs on; raises when Mem0 is missing."""
    out: dict[str, str] = {}
    for package in ("mem0ai", "fastembed", "qdrant-client", "scikit-learn"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError as exc:
            raise Mem0NotInstalledError(
                f"Mem0 is not installed ({package} is missing): pip install 'memstack[peers]' "
                "(mem0ai and fastembed, beside memstack[server])") from exc
    return out


def prepare_environment(workdir: Path) -> None:
    """Before Mem0 is imported: no telemetry (it would call PostHog), its home in ``workdir``
    (not ``~/.mem0``), no model-hub lookups, and its per-insert logs left out."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(workdir / "mem0-home")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.getLogger("mem0").setLevel(logging.WARNING)  # it logs every insert at INFO


def memory_config(workdir: Path, name: str) -> dict[str, Any]:
    """Mem0's configuration for one run (``name`` keeps the runs' stores apart)."""
    return {
        "vector_store": {"provider": "qdrant", "config": {
            "collection_name": "peers", "embedding_model_dims": MODEL_DIM,
            "path": str(workdir / f"qdrant-{name}"), "on_disk": True}},
        "embedder": {"provider": "huggingface", "config": {
            "model": str(model_path()), "embedding_dims": MODEL_DIM,
            "model_kwargs": {"device": "cpu"}}},
        "llm": {"provider": "openai", "config": {
            "api_key": "unused-infer-false", "openai_base_url": CLOSED_PORT_URL}},
        "history_db_path": str(workdir / f"history-{name}.db"),
    }


class MemstackEmbedding:
    """A Mem0 embedder (``embed``, ``embed_batch``) on memstack's ``onnx-int8`` encoder; Mem0's
    factory makes it from its config, so the encoder's load is part of Mem0's start-up."""

    def __init__(self, config: Any = None) -> None:
        self.config = config
        self.encoder = make_encoder("onnx-int8").load()

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        vector: list[float] = self.encoder.encode([text])[0].tolist()
        return vector

    def embed_batch(self, texts: Sequence[str], memory_action: str = "add") -> list[list[float]]:
        vectors: list[list[float]] = self.encoder.encode(list(texts)).tolist()
        return vectors


def build_memory(workdir: Path, embedder: str) -> Any:
    """A Mem0 ``Memory`` with ``embedder`` (one of :data:`EMBEDDERS`) and its keyword leg."""
    mem0_configs = importlib.import_module("mem0.configs.base")
    config = mem0_configs.MemoryConfig(**memory_config(workdir, embedder))
    if embedder == "onnx":
        factory = importlib.import_module("mem0.utils.factory")
        factory.EmbedderFactory.provider_to_class[PROVIDER] = f"{__name__}.MemstackEmbedding"
        embedders = importlib.import_module("mem0.embeddings.configs")
        # Mem0 validates provider names against its own list: set ours after validation
        config.embedder = embedders.EmbedderConfig.model_construct(
            provider=PROVIDER, config={"embedding_dims": MODEL_DIM})
    elif embedder == "st":
        importlib.import_module("torch").set_num_threads(ST_TORCH_THREADS)
    else:
        raise ValueError(f"embedder {embedder!r} is not one of {EMBEDDERS}")
    memory = importlib.import_module("mem0").Memory(config)
    memory.vector_store._bm25_encoder = keyword_encoder(workdir)  # Mem0 loads it lazily here
    return memory


def keyword_encoder(workdir: Path) -> Any:
    """fastembed's ``Bm25`` (Snowball stemmer) from a local folder: the model hub's copy only
    adds the stopword files, given here as scikit-learn's English list."""
    fastembed = importlib.import_module("fastembed")
    stopwords = importlib.import_module("sklearn.feature_extraction.text").ENGLISH_STOP_WORDS
    folder = workdir / "bm25"
    folder.mkdir(parents=True, exist_ok=True)
    return fastembed.SparseTextEmbedding("Qdrant/bm25", specific_model_path=str(folder),
                                         stopwords=set(stopwords))


def sessions(conv: Conversation) -> list[list[Turn]]:
    """The conversation's turns by LoCoMo session (``D<session>:<turn>``), in order."""
    return [list(group) for _, group in
            itertools.groupby(conv.turns, key=lambda t: t.dia_id.split(":", 1)[0])]


def messages(conv: Conversation, turns: Sequence[Turn]) -> list[dict[str, str]]:
    """Mem0 messages of the turns: the text ``eval locomo`` emits, and its role rule."""
    return [{"role": "user" if t.speaker == conv.speakers[0] else "assistant",
             "content": t.text} for t in turns]


def stored_ids(answer: Any, turns: Sequence[Turn]) -> dict[str, str]:
    """Mem0's memory id -> the turn it stored, from one ``add`` answer (one result per message,
    in order, when ``infer=False``)."""
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list) or len(results) != len(turns):
        raise MemstackError(f"Mem0 stored {len(results or [])} memories for {len(turns)} "
                            "turns; with infer=False it stores each message as it is")
    return {str(r["id"]): t.dia_id for r, t in zip(results, turns, strict=True)}


class Mem0Searcher:
    def __init__(self, memory: Any, turn_of: dict[str, str]) -> None:
        self.memory, self.turn_of = memory, turn_of

    def search(self, question: str, conversation: str) -> Hits:
        answer = self.memory.search(question, top_k=K, filters={"run_id": conversation},
                                    threshold=THRESHOLD)
        return [(self.turn_of[str(r["id"])],) for r in answer["results"]]


def has_keyword_leg(memory: Any, conv: Conversation) -> bool:
    """Whether Mem0's store answers keyword searches with hits (else Mem0 scores semantically
    only): the conversation's first turn, searched by its words."""
    found = memory.vector_store.keyword_search(conv.turns[0].text, top_k=1,
                                               filters={"run_id": conv.sample_id})
    return bool(found)


@contextmanager
def ingest(convs: Sequence[Conversation], embedder: str, workdir: Path,
           report: Report) -> Iterator[tuple[Side, bool]]:
    """Mem0 (``embedder``) with the conversations' turns in it, and whether its keyword leg
    answers. The clock covers ``Memory(config)`` (the model's load included) and every add."""
    importlib.import_module("mem0")  # imported before the clock, as memstack's modules are
    name = f"mem0_{embedder}"
    began = time.perf_counter()
    memory = build_memory(workdir, embedder)
    turn_of: dict[str, str] = {}
    for conv in convs:
        for turns in sessions(conv):
            answer = memory.add(messages(conv, turns), run_id=conv.sample_id, infer=False)
            turn_of.update(stored_ids(answer, turns))
    seconds = time.perf_counter() - began
    report("%s: %d turns searchable in %.1f s (%.1f turns/s, start-up included)", name,
           len(turn_of), seconds, len(turn_of) / seconds)
    keyword = has_keyword_leg(memory, convs[0])
    try:
        yield Side(name, seconds, len(turn_of), Mem0Searcher(memory, turn_of)), keyword
    finally:
        memory.vector_store.client.close()
