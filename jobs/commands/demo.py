"""``memstack demo``: run the demo on embedded defaults (the broker must be up)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="emit a sample conversation and show memory being built")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from memstack.jobs.demo import main

    return main()
