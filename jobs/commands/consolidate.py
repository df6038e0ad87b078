"""``memstack consolidate``: fold the consolidation feed into weights with Ray actors."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("consolidate", help="run the consolidation actors (Ray) over the feed")
    p.add_argument("--until-caught-up", action="store_true",
                   help="stop once the feed's end offsets (at start) are applied")
    p.add_argument("--actors", type=int, default=1, help="actors (feed partitions split)")
    p.add_argument("--dim", type=int, default=2048, help="random features D of new learners")
    p.add_argument("--window", type=int, default=1024, help="records per learner batch")
    p.add_argument("--checkpoint-every", type=int, default=8192, help="records per checkpoint")
    p.add_argument("--keep", type=int, default=5, help="checkpoints kept per actor")
    p.add_argument("--progress-every", type=float, default=10.0, help="seconds per progress line")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run the actors on the Ray cluster at ADDRESS (`memstack infra ray up` "
                        "prints it; default MEMSTACK_RAY_ADDRESS, else a local Ray)")
    p.add_argument("--backfill", action="store_true",
                   help="first feed the live stores' current facts into the feed topic")
    p.set_defaults(func=_consolidate)


def _consolidate(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.jobs.consolidate import main
    from memstack.pipelines.consolidation.job import JobConfig

    config = JobConfig(actors=args.actors, until_caught_up=args.until_caught_up, dim=args.dim,
                       window=args.window, checkpoint_every=args.checkpoint_every,
                       keep=args.keep, progress_every_s=args.progress_every)
    return main(Settings.from_env(), config, with_backfill=args.backfill, ray_address=args.ray)
