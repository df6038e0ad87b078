"""``memstack bench NAME`` and ``memstack eval NAME``.

The commands are always there; the benchmarks and evaluations they run (the lab) only in a
checkout: an installed wheel answers with where to get them (memstack.jobs.measure.load).
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable

from memstack.jobs.measure import Report, UnknownMeasurementError, json_stdout, load


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for family, help_text in (("bench", "run a benchmark (from a checkout)"),
                              ("eval", "run an evaluation (from a checkout)")):
        p = sub.add_parser(family, help=help_text)
        p.add_argument("name", help=f"the {family} to run (a module in memstack.jobs.{family})")
        p.add_argument("--quick", action="store_true", help="a smaller run of the same shape")
        p.add_argument("--json", action="store_true", help="end with one JSON line (always on)")
        p.add_argument("--seed", type=int, default=None,
                       help="seed of a randomised run (those that take one, e.g. eval faults)")
        p.add_argument("--rounds", type=int, default=None,
                       help="rounds of a randomised run (those that take them, e.g. eval faults)")
        p.add_argument("--secure", action="store_true",
                       help="run over SASL_SSL beside PLAINTEXT (those that take it: "
                            "bench ingest)")
        p.set_defaults(func=_runner(family))


def _runner(family: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        measure = load(family, args.name)
        extra = {k: getattr(args, k) for k in ("seed", "rounds")
                 if getattr(args, k, None) is not None}
        if getattr(args, "secure", False):
            extra["secure"] = True
        takes = inspect.signature(measure).parameters
        for option in extra:
            if option not in takes:
                raise UnknownMeasurementError(
                    f"{family} {args.name} takes no --{option}; leave it out")
        with json_stdout() as stdout:  # the JSON line is the only thing on stdout
            result = measure(args.quick, Report(f"{family} {args.name}"), **extra)
            print(result.to_json(), file=stdout, flush=True)
        return 0

    return run
