"""``memstack demo``: run the demo on embedded defaults (the broker must be up)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="start the service, write, read your writes, forget "
                                    "(the broker must be up)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    from memstack.jobs.demo import main

    return main(verbose=logging.getLogger().isEnabledFor(logging.DEBUG))
