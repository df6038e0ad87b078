"""Replay: rebuild stores from the log with PyFlink, verify them, switch readers to them.

Nothing here imports PyFlink at import time; :func:`run_replay` starts the local mini-cluster.
"""

from memstack.pipelines.replay.bounds import AtOffsets, AtTime, Bounds, Earliest, End, parse_point
from memstack.pipelines.replay.job import ReplayResult, ReplaySpec, run_replay
from memstack.pipelines.replay.progress import Progress, ProgressTracker
from memstack.pipelines.replay.switch import current_stores, switch_stores
from memstack.pipelines.replay.verify import Comparison, compare

__all__ = [
    "AtOffsets", "AtTime", "Bounds", "Comparison", "Earliest", "End",
    "Progress", "ProgressTracker", "ReplayResult", "ReplaySpec", "compare",
    "current_stores", "parse_point", "run_replay", "switch_stores",
]
