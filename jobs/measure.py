"""The shared interface of benchmarks and evaluations.

A run reports progress for people on stderr and ends with one JSON line on stdout:
``{"name": ..., "ratio": ... (benches), "figures": {flat name: number}, "plots": [PNG paths]}``.
Ratios are measured side by side in one run, because this machine is shared and noisy.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from memstack.foundation.errors import MemstackError


class UnknownMeasurementError(MemstackError):
    """No benchmark or evaluation of that name exists."""


class LabNotInstalledError(MemstackError):
    """The benchmarks and evaluations (the lab) are not installed: the wheel leaves them out."""


LAB_FROM_A_CHECKOUT = (
    "the benchmarks and evaluations ship with a checkout of memstack, not with the installed "
    "package (pip install memstack, light or [server], leaves them out); run them from a "
    "checkout: git clone <the memstack repository> memstack; cd memstack; make install; "
    ".venv/bin/memstack {family} {name}")


@dataclass
class Result:
    """What a benchmark or evaluation measured."""

    name: str
    figures: dict[str, float] = field(default_factory=dict)
    ratio: float | None = None
    plots: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        body: dict[str, object] = {"name": self.name}
        if self.ratio is not None:
            body["ratio"] = round(self.ratio, 4) if math.isfinite(self.ratio) else None
        body["figures"] = {k: _round(v) for k, v in self.figures.items()}
        body["plots"] = self.plots
        return json.dumps(body, sort_keys=False, allow_nan=False)


def _round(value: float) -> float | None:
    """Six significant digits: keeps 8.85e-17 as such instead of rounding it to 0. NaN and
    infinities (a crossover that never came) become null: strict JSON has no NaN."""
    number = float(value)
    return float(f"{number:.6g}") if math.isfinite(number) else None


class Report:
    """Progress for people: timestamped lines on stderr."""

    def __init__(self, name: str, stream: TextIO | None = None) -> None:
        self.name = name
        self.started = time.monotonic()
        self._stream = stream or sys.stderr

    def __call__(self, message: str, *args: object) -> None:
        elapsed = time.monotonic() - self.started
        text = message % args if args else message
        print(f"[{self.name} {elapsed:7.1f}s] {text}", file=self._stream, flush=True)

    def plot_dir(self) -> Path:
        out = Path("out") / "plots"
        out.mkdir(parents=True, exist_ok=True)
        return out


@contextmanager
def json_stdout() -> Iterator[TextIO]:
    """Send everything written to stdout to stderr, and yield a stream to the real stdout.

    The redirection is done on file descriptor 1 itself, so it also catches what libraries
    write behind Python's back: Faust's terminal escape on shutdown (``ESC[?25h``), the JVM of
    PyFlink and Kafka (child processes inherit fd 1), C extensions. It is never undone: output
    written later, at interpreter exit, goes to stderr too. Only what is written to the
    yielded stream reaches the real stdout, so ``--json`` prints exactly one line.
    """
    sys.stdout.flush()
    real = os.dup(1)
    os.dup2(2, 1)
    stream = os.fdopen(real, "w", encoding="utf-8")
    try:
        yield stream
    finally:
        stream.flush()
        stream.close()


def load(family: str, name: str) -> Callable[..., Result]:
    """Find ``memstack.jobs.<family>.<name>.run``.

    A measurement is a module, or a package whose ``__init__`` is the measurement and whose
    modules are its helpers (``memstack.jobs.eval.faults`` and ``faults.nemeses``): the name
    stays the same either way.

    The lab (``memstack.jobs.bench`` and ``memstack.jobs.eval``) is only there in a checkout
    (pyproject.toml's ``[tool.memstack]``): without it, :class:`LabNotInstalledError` says
    where to run it from. Nothing else in the package imports the lab.
    """
    if importlib.util.find_spec(f"memstack.jobs.{family}") is None:
        raise LabNotInstalledError(LAB_FROM_A_CHECKOUT.format(family=family, name=name))
    module_name = f"memstack.jobs.{family}.{name.replace('-', '_')}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise UnknownMeasurementError(f"no {family} named '{name}'") from exc
        raise
    run = getattr(module, "run", None)
    if not callable(run):  # a helper module of the family (a workload, a data loader)
        raise UnknownMeasurementError(f"no {family} named '{name}' ({module_name} is a helper)")
    measure: Callable[..., Result] = run
    return measure
