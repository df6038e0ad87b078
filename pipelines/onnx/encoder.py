"""all-MiniLM-L6-v2 on ONNX Runtime: the fused graph, int8 (or fp32), one text per run.

Each text runs alone, unpadded, on a session with one intra-op thread; ``threads`` Python
threads share the session (``InferenceSession.run`` is thread-safe and releases the GIL), each
taking every ``threads``-th text of the call in order of length. Why one text per run:

- **deterministic per text**: dynamic int8 quantises activations with one scale per input
  tensor, so in a padded batch a text's vector would depend on its batch neighbours and their
  padding. Alone, a text's vector is a function of the text only, bit for bit, however the live
  worker or the replay batches (``tests/pipelines/test_onnx_encoder.py`` checks it);
- **no padding**: a batch pads every text to its longest; alone each runs at its own length;
- **no waiting**: single-threaded runs never wait for a sibling thread at each operator, which
  is where torch's two threads lose time on a busy machine.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from memstack.pipelines.encoder_model import (
    MODEL_DIM,
    MODEL_NAME,
    EncoderUnavailableError,
    model_path,
)
from memstack.pipelines.onnx.export import INPUTS, Precision, built_model
from memstack.pipelines.stores.base import Vectors

log = logging.getLogger(__name__)

MAX_TOKENS = 256
"""sentence-transformers' ``max_seq_length`` for this model (its tokenizer.json says 128)."""


class OnnxMiniLMEncoder:
    """The :class:`~memstack.pipelines.embedding.Encoder` on ONNX Runtime, ``threads`` runners."""

    def __init__(self, precision: Precision = "int8", *, threads: int = 2) -> None:
        if threads < 1:
            raise ValueError(f"threads={threads} must be >= 1")
        self.precision = precision
        self._threads = threads
        self._session: Any = None
        self._tokenizer: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.graph: Path | None = None
        """The built graph file (after :meth:`load`)."""

    @property
    def name(self) -> str:
        return f"{MODEL_NAME} onnx-{self.precision}"

    @property
    def dim(self) -> int:
        return MODEL_DIM

    def load(self) -> OnnxMiniLMEncoder:
        """Build the graph if the cache lacks it, open the session (otherwise ``encode`` does)."""
        with self._lock:
            if self._session is None:
                self.graph = built_model(self.precision)
                self._tokenizer = _tokenizer(model_path())
                self._session = _session(self.graph)
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="minilm-onnx")
                log.info("loaded %s from %s (%d runners)", self.name, self.graph, self._threads)
        return self

    def encode(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), MODEL_DIM), dtype=np.float32)
        if not texts:
            return out
        self.load()
        assert self._pool is not None
        if len(texts) == 1:  # a query: run it here, never queued behind a batch in the pool
            out[0] = self._run([self._tokenizer.encode(texts[0]).ids])[0]
            return out
        encodings = self._tokenizer.encode_batch(list(texts))
        longest_first = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        shares = [longest_first[n::self._threads] for n in range(self._threads)]
        jobs = [self._pool.submit(self._run, [encodings[i].ids for i in share])
                for share in shares if share]
        for share, job in zip((s for s in shares if s), jobs, strict=True):
            out[share] = job.result()
        return out

    def _run(self, token_ids: list[list[int]]) -> Vectors:
        rows = np.empty((len(token_ids), MODEL_DIM), dtype=np.float32)
        for n, ids in enumerate(token_ids):
            tokens = np.asarray([ids], dtype=np.int64)
            feed = dict(zip(INPUTS, (tokens, np.ones_like(tokens), np.zeros_like(tokens)),
                            strict=True))
            rows[n] = self._session.run(None, feed)[0][0]
        return rows

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def _tokenizer(source: Path) -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.no_padding()
    return tokenizer


def _session(graph: Path) -> Any:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise EncoderUnavailableError(
            "onnxruntime is not installed; `pip install onnxruntime==1.31.1` or set "
            "MEMSTACK_ENCODER=torch") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
