"""``memstack bench encoder``: the ONNX int8 encoder against the torch encoder, same texts, cores.

``ratio`` = ONNX int8 texts/s ÷ torch texts/s, measured side by side in one process on the same
LoCoMo turns (2,048 drawn with a fixed seed; 256 with ``--quick``), each side with 2 threads:

- torch: the shipped :class:`MiniLMEncoder` (sentence-transformers, batch 64, 2 torch threads),
  fed ``CALL`` texts per call, so its own sort by length keeps padding small (as the replay
  feeds it);
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

import numpy as np

from memstack.jobs.measure import Report, Result
from memstack.pipelines.embedding import LoadableEncoder, make_encoder
from memstack.pipelines.stores.base import Vectors

SAMPLE, QUICK_SAMPLE = 2048, 256
CALL = 256
"""Texts per encode call on both sides."""
SEED = 14


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

    got = locomo.run(quick, Report(f"{report.name} locomo[{encoder.name}]"), encoder).figures
    return {mode: got[f"recall@10_{mode}"] for mode in ("hybrid", "vector", "bm25")}


def run(quick: bool, report: Report) -> Result:
    texts = sample_texts(quick)
    torch_enc, onnx_enc = make_encoder("torch"), make_encoder("onnx-int8")
    began = time.perf_counter()
    onnx_enc.load()
    report("ONNX int8 graph ready in %.1f s (built once, then cached)", time.perf_counter() - began)
    torch_enc.load()
    report("%d LoCoMo turns, %d per call, calls alternating", len(texts), CALL)
    seconds, vectors = interleaved({"torch": torch_enc, "onnx": onnx_enc}, texts, report)
    cosine = np.sum(vectors["onnx"] * vectors["torch"], axis=1)
    figures = {
        "texts": float(len(texts)),
        "torch_texts_per_s": len(texts) / seconds["torch"],
        "fast_texts_per_s": len(texts) / seconds["onnx"],
        "cosine_to_torch_mean": float(cosine.mean()),
        "cosine_to_torch_min": float(cosine.min()),
        "onnx_bitwise_across_batches": float(bitwise_across_batches(onnx_enc, texts,
                                                                    vectors["onnx"])),
    }
    report("torch %.0f texts/s, onnx int8 %.0f texts/s; cosine mean %.4f min %.4f",
           figures["torch_texts_per_s"], figures["fast_texts_per_s"],
           figures["cosine_to_torch_mean"], figures["cosine_to_torch_min"])
    recall = {name: locomo_recall(enc, quick, report)
              for name, enc in (("torch", torch_enc), ("onnx", onnx_enc))}
    for mode in ("hybrid", "vector", "bm25"):
        figures[f"locomo_recall10_{mode}_torch"] = recall["torch"][mode]
        figures[f"locomo_recall10_{mode}_fast"] = recall["onnx"][mode]
        figures[f"locomo_recall10_{mode}_delta"] = recall["onnx"][mode] - recall["torch"][mode]
    report("LoCoMo recall@10 delta (onnx - torch): hybrid %+.4f, vector %+.4f",
           figures["locomo_recall10_hybrid_delta"], figures["locomo_recall10_vector_delta"])
    return Result("bench encoder", figures, ratio=seconds["torch"] / seconds["onnx"])
