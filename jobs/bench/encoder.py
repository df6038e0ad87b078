"""``memstack bench encoder``: the ONNX int8 encoder against the torch encoder, same texts, cores.

``ratio`` = ONNX int8 texts/s ÷ torch texts/s, measured side by side in one process on the same
LoCoMo turns (2,048 drawn with a fixed seed; 256 with ``--quick``), each side with 2 threads:

- torch, two ways, the faster one being the denominator: the shipped :class:`MiniLMEncoder`
  (sentence-transformers, batch 64, 2 torch threads; ``torch_1x2``) and the ONNX side's shape
  (:class:`TorchRunners`: 2 Python threads with 1 torch thread each, each encoding every other
  text of the call longest first; ``torch_2x1``); both get ``CALL`` texts per call, so the
  model's own sort by length keeps padding small (as the replay feeds it);
- ONNX: :class:`OnnxMiniLMEncoder` int8 (the fused graph, one text per run, 2 runner threads).

The machine is shared, so the two sides alternate call by call (the order flips every round)
and each side's seconds are summed: load that comes and goes falls on both.

Also measured: cosine of every ONNX vector to its torch vector (mean, min), whether ONNX vectors
are bitwise equal when the same texts are encoded in other calls and orders
(``onnx_bitwise_across_batches``), and LoCoMo evidence recall@10 of ``memstack eval locomo``
run once with each encoder (all 10 conversations; 2 with ``--quick``):
``locomo_recall10_{hybrid,vector}_delta`` = ONNX − torch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from memstack.jobs.measure import Report, Result
from memstack.pipelines.embedding import LoadableEncoder, MiniLMEncoder, make_encoder
from memstack.pipelines.stores.base import Vectors

SAMPLE, QUICK_SAMPLE = 2048, 256
CALL = 256
"""Texts per encode call on both sides."""
SEED = 14


class TorchRunners:
    """The torch model in the ONNX encoder's shape: ``runners`` Python threads, 1 torch thread
    each, sharing a call's texts longest first (torch's threads are process-wide, so the count is
    set for the call and put back)."""

    def __init__(self, model: MiniLMEncoder, runners: int = 2) -> None:
        self.model, self.runners = model, runners
        self._pool = ThreadPoolExecutor(runners)

    @property
    def name(self) -> str:
        return f"{self.model.name} torch {self.runners}x1"

    @property
    def dim(self) -> int:
        return self.model.dim

    def load(self) -> TorchRunners:
        self.model.load()
        return self

    def encode(self, texts: Sequence[str]) -> Vectors:
        import torch

        st: Any = self.load().model._model
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        shares = [order[n::self.runners] for n in range(self.runners)]
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            parts = list(self._pool.map(lambda share: st.encode(
                [texts[i] for i in share], batch_size=64, normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False), shares))
        finally:
            torch.set_num_threads(before)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for share, part in zip(shares, parts, strict=True):
            out[share] = part
        return out


def sample_texts(quick: bool) -> list[str]:
    """LoCoMo turn texts as the eval emits them, drawn without replacement with a fixed seed."""
    from memstack.jobs.eval.locomo_data import load

    turns = [t.text for conv in load() for t in conv.turns]
    size = min(QUICK_SAMPLE if quick else SAMPLE, len(turns))
    picked = np.random.default_rng(SEED).choice(len(turns), size, replace=False)
    return [turns[i] for i in picked]


def interleaved(sides: dict[str, LoadableEncoder], texts: list[str],
                report: Report) -> tuple[dict[str, float], dict[str, Vectors]]:
    """Seconds each side spent over ``texts``, calls alternating; and each side's vectors."""
    seconds = dict.fromkeys(sides, 0.0)
    parts: dict[str, list[Vectors]] = {name: [] for name in sides}
    for encoder in sides.values():
        encoder.encode(texts[:32])  # warm-up
    for n, start in enumerate(range(0, len(texts), CALL)):
        call = texts[start:start + CALL]
        order = list(sides) if n % 2 == 0 else list(sides)[::-1]
        for name in order:
            began = time.perf_counter()
            parts[name].append(sides[name].encode(call))
            seconds[name] += time.perf_counter() - began
        report("%d/%d texts: %s", start + len(call), len(texts),
               "  ".join(f"{k} {(start + len(call)) / v:.0f}/s" for k, v in seconds.items()))
    return seconds, {name: np.concatenate(p) for name, p in parts.items()}


def bitwise_across_batches(encoder: LoadableEncoder, texts: list[str], first: Vectors) -> bool:
    """The same texts again, reversed and in calls of another size: every bit equal?"""
    again = np.concatenate([encoder.encode(texts[::-1][i:i + 100])
                            for i in range(0, len(texts), 100)])[::-1]
    return bool(np.array_equal(again, first))


def locomo_recall(encoder: LoadableEncoder, quick: bool, report: Report) -> dict[str, float]:
    from memstack.jobs.eval import locomo

    got = locomo.run(quick, Report(f"{report.name} locomo[{encoder.name}]"), encoder,
                     tuned=False).figures
    return {mode: got[f"recall@10_{mode}"] for mode in ("hybrid", "vector", "bm25")}


def run(quick: bool, report: Report) -> Result:
    texts = sample_texts(quick)
    torch_enc, onnx_enc = MiniLMEncoder(), make_encoder("onnx-int8")
    began = time.perf_counter()
    onnx_enc.load()
    report("ONNX int8 graph ready in %.1f s (built once, then cached)", time.perf_counter() - began)
    sides: dict[str, LoadableEncoder] = {"torch_1x2": torch_enc.load(),
                                         "torch_2x1": TorchRunners(torch_enc), "onnx": onnx_enc}
    report("%d LoCoMo turns, %d per call, calls alternating", len(texts), CALL)
    seconds, vectors = interleaved(sides, texts, report)
    best_torch = min(seconds["torch_1x2"], seconds["torch_2x1"])
    cosine = np.sum(vectors["onnx"] * vectors["torch_1x2"], axis=1)
    figures = {
        "texts": float(len(texts)),
        "torch_texts_per_s": len(texts) / best_torch,
        "torch_1x2_texts_per_s": len(texts) / seconds["torch_1x2"],
        "torch_2x1_texts_per_s": len(texts) / seconds["torch_2x1"],
        "fast_texts_per_s": len(texts) / seconds["onnx"],
        "cosine_to_torch_mean": float(cosine.mean()),
        "cosine_to_torch_min": float(cosine.min()),
        "onnx_bitwise_across_batches": float(bitwise_across_batches(onnx_enc, texts,
                                                                    vectors["onnx"])),
    }
    report("torch %.0f texts/s (best of 1x2 %.0f, 2x1 %.0f), onnx int8 %.0f texts/s; cosine "
           "mean %.4f min %.4f", figures["torch_texts_per_s"], figures["torch_1x2_texts_per_s"],
           figures["torch_2x1_texts_per_s"], figures["fast_texts_per_s"],
           figures["cosine_to_torch_mean"], figures["cosine_to_torch_min"])
    figures.update(recall_deltas(torch_enc, onnx_enc, quick, report))
    return Result("bench encoder", figures, ratio=best_torch / seconds["onnx"])


def recall_deltas(torch_enc: LoadableEncoder, onnx_enc: LoadableEncoder, quick: bool,
                  report: Report) -> dict[str, float]:
    recall = {name: locomo_recall(enc, quick, report)
              for name, enc in (("torch", torch_enc), ("fast", onnx_enc))}
    figures: dict[str, float] = {}
    for mode in ("hybrid", "vector", "bm25"):
        figures[f"locomo_recall10_{mode}_torch"] = recall["torch"][mode]
        figures[f"locomo_recall10_{mode}_fast"] = recall["fast"][mode]
        figures[f"locomo_recall10_{mode}_delta"] = recall["fast"][mode] - recall["torch"][mode]
    report("LoCoMo recall@10 delta (onnx - torch): hybrid %+.4f, vector %+.4f",
           figures["locomo_recall10_hybrid_delta"], figures["locomo_recall10_vector_delta"])
    return figures
