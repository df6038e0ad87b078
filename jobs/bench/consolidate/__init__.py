"""``memstack bench consolidate``: closed-book recall, capacity, forgetting and speed of the
consolidation learner, on real MiniLM embeddings of templated facts.

Facts are ``(person, relation, object)``: 10 relations (lives in, works for, ...), each with a
pool of 20 to 22 objects and three paraphrase templates. A cue is ``"subject relation"``; the
target is the object's embedding, given by an ``EmbeddingTeacher`` (distillation); recall@1
decodes ``W φ(cue)`` to the nearest object of that relation's pool (chance ≈ 5%). Embeddings
are cached in ``out/cache/``: a GPU machine without the model runs from that cache.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence

import torch

from memstack.jobs.bench.consolidate.data import Data, learner_config, load_data
from memstack.jobs.measure import Report, Result
from memstack.operators.consolidation import (
    RidgeLearner,
    WriteBatch,
)


def _hit(learner: RidgeLearner, data: Data, idx: torch.Tensor,
         cues: torch.Tensor | None = None) -> torch.Tensor:
    """Recall@1 per item (bool ``[len(idx)]``) for cues of items ``idx`` (default: exact)."""
    cues = data.exact[idx] if cues is None else cues
    hit = torch.zeros(len(idx), dtype=torch.bool)
    for r, pool in enumerate(data.pools):
        mask = data.relation[idx] == r
        if bool(mask.any()):
            best = learner.decode(cues[mask], pool)[0].cpu()
            hit[mask] = best == data.gold[idx][mask]
    return hit


def _write(learner: RidgeLearner, data: Data, lo: int, hi: int, t0: float = 0.0) -> None:
    """Write facts lo..hi-1, one per second of log time, targets from the teacher."""
    for start in range(lo, hi, 2048):
        end = min(hi, start + 2048)
        ids = [f"f{i}" for i in range(start, end)]
        targets = data.teacher.targets(data.cues[start:end])
        times = torch.arange(start, end, dtype=torch.float64) + t0
        learner.write_batch(WriteBatch.of(ids, data.exact[start:end], targets, times))


def capacity(data: Data, dim: int, loads: Sequence[int], device: str, report: Report,
             half_life: float | None = None, block: int = 256) -> tuple[list[float], list[float]]:
    """Recall of all written items, and of the first ``block`` items, at each load."""
    learner = RidgeLearner(learner_config(dim, half_life), data.centre, device)
    every, first, done = [], [], 0
    for load in loads:
        _write(learner, data, done, load)
        done = load
        every.append(float(_hit(learner, data, torch.arange(load)).double().mean()))
        first.append(float(_hit(learner, data, torch.arange(min(block, load))).double().mean()))
        report("D=%d half-life=%s load=%d recall=%.3f first-%d=%.3f", dim, half_life, load,
               every[-1], block, first[-1])
    return every, first


def _items_at_90(loads: Sequence[int], recall: Sequence[float]) -> float:
    """Largest load with recall ≥ 0.9, interpolated linearly between measured loads."""
    best = float(loads[0]) if recall[0] >= 0.9 else 0.0
    for l0, r0, l1, r1 in zip(loads, recall, loads[1:], recall[1:], strict=False):
        if r0 >= 0.9:
            best = float(l1) if r1 >= 0.9 else l0 + (l1 - l0) * (r0 - 0.9) / (r0 - r1)
    return best


def forgetting(data: Data, dim: int, n: int, device: str, report: Report) -> dict[str, float]:
    """Write n facts, forget every 10th; compare with never-written controls and a rebuild."""
    learner = RidgeLearner(learner_config(dim), data.centre, device)
    _write(learner, data, 0, n)
    forget = torch.arange(0, n, 10)
    keep = torch.tensor([i for i in range(n) if i % 10])
    control = torch.arange(n, n + len(forget))

    def hits() -> dict[str, float]:
        groups = {"forgotten": forget, "retained": keep, "control": control}
        return {k: float(_hit(learner, data, i).double().mean()) for k, i in groups.items()}

    before = hits()
    learner.remove([f"f{int(i)}" for i in forget])
    after = hits()
    scratch = RidgeLearner.rebuild(learner.config, data.centre, learner.log.live(),
                                   now=learner.now, device=device)
    errors = [float((r - f).norm() / f.norm()) for r, f in zip(learner.sums(), scratch.sums(),
                                                               strict=True)]
    w_err = float((learner.weights() - scratch.weights()).norm() / scratch.weights().norm())
    report("forget %d of %d: before %s after %s; sums rel err %.2e, W rel err %.2e",
           len(forget), n, before, after, max(errors), w_err)
    return {
        "recall_forgotten_before": before["forgotten"],
        "recall_forgotten": after["forgotten"],
        "recall_control": after["control"],
        "recall_retained_before_forget": before["retained"],
        "recall_retained_after_forget": after["retained"],
        "removal_rel_error": max(errors),
        "removal_rel_error_log10": math.log10(max(max(errors), 1e-300)),
        "removal_weights_rel_error": w_err,
    }


def generalisation(data: Data, dim: int, n: int, device: str) -> dict[str, float]:
    """Recall on the exact cues vs paraphrased cues of the same written facts."""
    learner = RidgeLearner(learner_config(dim), data.centre, device)
    _write(learner, data, 0, n)
    idx = torch.arange(len(data.para))
    exact, para = (float(_hit(learner, data, idx, c).double().mean()) for c in (None, data.para))
    return {"recall_exact": exact, "recall_paraphrase": para}


def _mean_time(step: Callable[[], None], reps: int, device: str) -> float:
    """Seconds per ``step()`` over reps back-to-back runs (a stream), after one warm-up run."""
    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    step()
    sync()
    started = time.perf_counter()
    for _ in range(reps):
        step()
    sync()
    return (time.perf_counter() - started) / reps


def throughput(data: Data, dim: int, batch: int, reps: int, device: str,
               report: Report) -> dict[str, float]:
    """Batched writes/s, and their FLOP/s against bare matmuls of the same shapes: a write's
    two products, the lift ``[B, 384] @ [384, D]`` and the update ``[D, B] @ [B, D + 384]``, run
    alone on random float64 data (the ratio: the share of that speed a whole write achieves)."""
    learner = RidgeLearner(learner_config(dim), data.centre, device)
    rows = torch.randint(0, data.exact.shape[0], (batch,), generator=torch.Generator())
    cues = data.exact[rows].to(device)
    targets = data.teacher.targets([data.cues[int(i)] for i in rows]).to(device)
    d_in, d_out = cues.shape[1], learner.config.dim_out
    flops = 2.0 * batch * dim * (d_in + dim + d_out)
    id_lists = iter([[f"t{n}.{k}" for k in range(batch)] for n in range(reps + 1)])

    def write() -> None:
        learner.write_batch(WriteBatch.of(next(id_lists), cues, targets, learner.now + 1.0))

    x, omega, right, out = (torch.randn(*shape, dtype=torch.float64, device=device) for shape in
                            ((batch, d_in), (d_in, dim), (batch, dim + d_out), (dim, dim + d_out)))

    def bare() -> None:
        out.addmm_((x @ omega).T, right)

    write_s, bare_s = _mean_time(write, reps, device), _mean_time(bare, reps, device)
    report("D=%d batch=%d: write %.4f s, bare matmuls %.4f s (%s)", dim, batch, write_s, bare_s,
           device)
    return {"updates_per_s": batch / write_s, "write_gflops": flops / write_s / 1e9,
            "matmul_gflops": flops / bare_s / 1e9, "batch": float(batch)}


Series = dict[str, tuple[list[int], list[float]]]


def _plot(report: Report, capacity_curves: Series, retention: Series,
          bars: dict[str, float]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for name, series, xlabel, ylabel in (
        ("capacity", capacity_curves, "facts written", "recall@1 of all written facts"),
        ("retention", retention, "later writes", "recall@1 of the first 256 facts"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, (xs, ys) in series.items():
            ax.plot(xs, ys, marker="o", label=label)
        ax.axhline(0.9, color="grey", linestyle=":")
        ax.set(xlabel=xlabel, ylabel=ylabel, xscale="log", ylim=(0, 1.05), title=name)
        ax.legend()
        paths.append(report.plot_dir() / f"consolidate_{name}.png")
        fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(list(bars), list(bars.values()))
    ax.set(ylabel="recall@1", ylim=(0, 1.05), title="generalisation and forgetting")
    ax.tick_params(axis="x", rotation=30)
    paths.append(report.plot_dir() / "consolidate_recall.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close("all")
    return [str(p) for p in paths]


def _capacity_and_retention(data: Data, dims: list[int], headline: int, loads: dict[int, list[int]],
                            device: str, report: Report) -> tuple[dict[str, float], Series, Series]:
    figures: dict[str, float] = {}
    curves: Series = {}
    retention: Series = {}
    for dim in dims:
        every, first = capacity(data, dim, loads[dim], device, report)
        curves[f"D={dim}"] = (loads[dim], every)
        figures[f"capacity_items_D{dim}"] = _items_at_90(loads[dim], every)
        if dim == headline:
            retention["no decay"] = ([x - 256 for x in loads[dim]], first)
            figures["retention_first256_at_max_load"] = first[-1]
    half_life = headline / 2.0
    first = capacity(data, headline, loads[headline], device, report, half_life=half_life)[1]
    retention[f"half-life {half_life:.0f} writes"] = ([x - 256 for x in loads[headline]], first)
    return figures, curves, retention


def run(quick: bool, report: Report) -> Result:
    """The whole bench; ``quick`` uses smaller D and fewer facts, the same shape."""
    device = os.environ.get("MEMSTACK_BENCH_DEVICE") or ("cuda" if torch.cuda.is_available()
                                                         else "cpu")
    dims = [256, 512, 1024] if quick else [1024, 2048, 4096]
    headline = 1024 if quick else 2048
    n_max = 4096 if quick else 14000
    data = load_data(n_max + 512, 512, device, report)
    factors = (0.5, 1, 2, 4) if quick else (0.5, 1, 2, 4, 8)
    loads = {d: sorted({int(f * d) for f in factors if f * d < n_max}
                       | {min(n_max, 4 * d) if quick else n_max}) for d in dims}
    figures: dict[str, float] = {"D": float(headline), "device_cuda": float(device == "cuda"),
                                 "chance": statistics.mean(1 / len(p) for p in data.pools)}
    found, curves, retention = _capacity_and_retention(data, dims, headline, loads, device, report)
    figures |= found
    figures.update(generalisation(data, headline, headline // 2, device))
    figures.update(forgetting(data, headline, headline // 2, device, report))
    batch = 8192 if device == "cuda" else 1024
    speed = throughput(data, headline, batch, 3 if quick else 5, device, report)
    figures.update(speed)
    from memstack.jobs.bench.consolidate.actor import actor_throughput

    figures.update(actor_throughput(data, headline, batch, 3 if quick else 5, device, report))
    for dim in [] if quick else [d for d in dims if d != headline]:
        figures[f"updates_per_s_D{dim}"] = throughput(data, dim, batch, 3, device,
                                                      report)["updates_per_s"]
    bars = {k: figures[k] for k in ("recall_exact", "recall_paraphrase", "recall_forgotten",
                                    "recall_control", "recall_retained_after_forget")}
    plots = _plot(report, curves, retention, bars)
    ratio = speed["write_gflops"] / speed["matmul_gflops"]
    return Result("consolidate", figures=figures, ratio=ratio, plots=plots)
