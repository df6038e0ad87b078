"""Plots of ``memstack eval openproblems`` (matplotlib, Agg) under ``out/plots/``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memstack.jobs.measure import Report

Curve = Mapping[int, tuple[float, float, float, int]]


def plot_state(curves: Mapping[str, Curve], report: Report) -> str:
    """Recall vs N turns back: each state config against its byte window, and the budget
    window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (name, curve) in enumerate(curves.items()):
        ns = list(curve)
        color = f"C{i}"
        ax.plot(ns, [curve[n][0] for n in ns], "-o", color=color, label=f"state {name} (top 10)")
        ax.plot(ns, [curve[n][1] for n in ns], "--", color=color,
                label=f"window, bytes of state {name}")
        if i == 0:
            ax.plot(ns, [curve[n][2] for n in ns], ":k", label="window, 2,000-token budget")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evidence N turns back")
    ax.set_ylabel("evidence recall")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("LoCoMo: session state vs context window")
    ax.legend(fontsize=7)
    return _saved(fig, "openproblems_state_vs_window.png", report)


def plot_weights(figures: Mapping[str, float], report: Report) -> str:
    """Memory-only retrieval against the baselines (recall@10), all and held out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["weights_recall10_shipped", "weights_recall10", "vector_recall10", "bm25_recall10",
             "weights_recall10_with_notes", "vector_recall10_with_notes"]
    labels = ["weights\n(shipped)", "weights\n(tuned)", "dense", "BM25", "weights\n+notes",
              "dense\n+notes"]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.4
    for j, suffix in enumerate(("", "_heldout")):
        values = [figures.get(n + suffix, 0.0) for n in names]
        ax.bar([i + j * width for i in range(len(names))], values, width,
               label="all" if not suffix else "held out (not tuned on)")
    ax.set_xticks([i + width / 2 for i in range(len(names))], labels, fontsize=8)
    ax.set_ylabel("evidence recall@10")
    ax.set_title("LoCoMo: memory-only retrieval from the consolidated weights")
    ax.legend(fontsize=8)
    return _saved(fig, "openproblems_weights.png", report)


def _saved(fig: Any, name: str, report: Report) -> str:
    """Every open-problems plot: laid out, written to the report's plot folder, closed, named."""
    import matplotlib.pyplot as plt

    path = report.plot_dir() / name
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    report("plot: %s", path)
    return str(path)
