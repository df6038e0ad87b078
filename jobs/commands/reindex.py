"""``memstack reindex --model NAME``: replay into new stores with another encoder, verify,
switch (the running service adopts them without a failed query)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("reindex", help="re-embed memory with another encoder: replay into new "
                                       "stores, verify, switch (docs/replay.md)")
    p.add_argument("--model", required=True, help="the encoder: onnx-int8, onnx-fp32 or torch")
    p.add_argument("--into", type=Path, default=None,
                   help="new stores directory (default: $MEMSTACK_HOME/stores/<model>-<time>)")
    p.add_argument("--parallelism", type=int, default=1,
                   help="replay prepare/embed subtasks (default 1)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds to wait for a running service to adopt the stores (600)")
    p.set_defaults(func=_reindex)


def _reindex(args: argparse.Namespace) -> int:
    from memstack.jobs.reindex import main

    result = main(args.model, into=args.into, parallelism=args.parallelism,
                  timeout_s=args.timeout)
    print(result.summary())
    return 0
