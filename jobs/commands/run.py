"""``memstack run``: start the live pipeline (Faust worker projecting events into the stores)."""

from __future__ import annotations

import argparse
import logging


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from memstack.jobs.run import add_arguments

    parser = sub.add_parser("run", help="run the live pipeline: events -> DuckDB + LanceDB")
    add_arguments(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.jobs.run import options_from, quiet_libraries, run_live

    quiet_libraries(logging.getLogger().isEnabledFor(logging.DEBUG))
    return run_live(Settings.from_env(), options_from(args))
