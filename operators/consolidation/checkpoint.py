"""Checkpoints of a learner: bytes or a file, written atomically, restored bit-identically.

A checkpoint holds the config, the centre vector, the sums ``M = [S_A | S_C]``, t0 and now, the
counters, the live write log and a caller's ``meta`` (an actor puts its applied offsets there,
so state and offsets are saved in one atomic write). Tensors are saved on the CPU and restored
onto any device; the feature map is regenerated from its seed.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memstack.foundation.durable import fsync_dir
from memstack.operators.consolidation.errors import CheckpointError
from memstack.operators.consolidation.learner import LearnerConfig, RidgeLearner
from memstack.operators.consolidation.writelog import WriteBatch

FORMAT = "memstack.consolidation/1"


@dataclass(frozen=True)
class Restored:
    """A learner restored from a checkpoint, and the caller's meta saved with it."""

    learner: RidgeLearner
    meta: dict[str, Any]


def snapshot(learner: RidgeLearner, meta: Mapping[str, Any] | None = None) -> bytes:
    """Serialise the learner (compacting its write log first) with JSON-able ``meta``."""
    learner.log.compact()
    live = learner.log.live().to("cpu")
    header = {
        "format": FORMAT,
        "config": learner.config.to_dict(),
        "t0": learner.t0,
        "now": learner.now,
        "counters": {"version": learner.version, "writes": learner.writes,
                     "removals": learner.removals},
        "masses": list(learner.masses),
        "item_ids": list(live.item_ids),
        "meta": dict(meta or {}),
    }
    body = {
        "header": json.dumps(header),
        **learner.state_tensors(),
        "cues": live.cues, "targets": live.targets,
        "weights": live.weights, "log_times": live.log_times,
    }
    buf = io.BytesIO()
    torch.save(body, buf)
    return buf.getvalue()


def restore(data: bytes, device: str = "cpu") -> Restored:
    """Rebuild the learner a ``snapshot`` saved, on ``device``."""
    try:
        body = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        header = json.loads(body["header"])
    except (RuntimeError, KeyError, ValueError, EOFError) as exc:
        raise CheckpointError(f"unreadable consolidation checkpoint: {exc}") from exc
    if header.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint format {header.get('format')!r}, expected {FORMAT!r}")
    config = LearnerConfig.from_dict(header["config"])
    learner = RidgeLearner(config, body["centre"], device)
    live = WriteBatch(tuple(header["item_ids"]), body["cues"], body["targets"],
                      body["weights"], body["log_times"]).to(learner.device)
    learner.load_state(body["m"], header["t0"], header["now"], header["counters"], live,
                       tuple(header["masses"]))
    return Restored(learner, header["meta"])


def save(learner: RidgeLearner, path: Path, meta: Mapping[str, Any] | None = None) -> Path:
    """Write a checkpoint to ``path`` atomically (temp file, fsync, rename); return the path."""
    data = snapshot(learner, meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def load(path: Path, device: str = "cpu") -> Restored:
    """Restore a checkpoint file written by ``save``."""
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}: start fresh or rebuild from the log")
    return restore(path.read_bytes(), device)
