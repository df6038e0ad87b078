"""Checkpoints of a learner bank, kept by log position, written atomically, pruned to the last N.

Layout under ``<root>/<group>/`` (``group`` = the feed partitions an actor owns, ``p0-2``)::

    ckpt-<known µs>-<Σ offsets>/manifest.json   offsets, log times, shard -> file
    ckpt-<known µs>-<Σ offsets>/<hash>.pt        one learner (operators checkpoint, meta=lineage)

``known`` is the latest fact log time the learners applied, so :meth:`CheckpointStore.as_of`
answers "the weights as memory knew them at time t". A checkpoint is built in a temp dir and
renamed into place (atomic; then the parent is fsynced): the learners and the feed offsets they
reflect always commit together. A shard not changed since the previous checkpoint is hard-linked
from it rather than rewritten.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstack.foundation.durable import fsync_dir
from memstack.operators.consolidation import checkpoint
from memstack.operators.consolidation.errors import CheckpointError
from memstack.pipelines.consolidation.bank import LearnerBank

log = logging.getLogger(__name__)

FORMAT = "memstack.consolidation.bank/1"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Manifest:
    path: Path
    offsets: dict[int, int]
    known: float
    feed_log_time: float
    shards: dict[str, str]

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        try:
            body = json.loads((directory / MANIFEST).read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"unreadable checkpoint manifest in {directory}: {exc}") from exc
        if body.get("format") != FORMAT:
            raise CheckpointError(f"{directory}: format {body.get('format')!r}, want {FORMAT!r}")
        return cls(directory, {int(p): int(o) for p, o in body["offsets"].items()},
                   float(body["known"]), float(body["feed_log_time"]), dict(body["shards"]))


def group_name(partitions: list[int] | tuple[int, ...]) -> str:
    return "p" + "-".join(str(p) for p in sorted(partitions))


def _file_of(shard: str) -> str:
    return hashlib.blake2b(shard.encode(), digest_size=8).hexdigest() + ".pt"


class CheckpointStore:
    """One actor's checkpoints (``directory`` = root / group)."""

    def __init__(self, directory: Path, keep: int = 5) -> None:
        self.directory = Path(directory)
        self.keep = max(1, keep)

    def manifests(self) -> list[Manifest]:
        """Every complete checkpoint, oldest first."""
        if not self.directory.exists():
            return []
        found = [Manifest.read(d) for d in sorted(self.directory.glob("ckpt-*"))
                 if (d / MANIFEST).exists()]
        return sorted(found, key=lambda m: (m.known, sum(m.offsets.values()), m.path.name))

    def latest(self) -> Manifest | None:
        found = self.manifests()
        return found[-1] if found else None

    def as_of(self, known: float | None) -> Manifest | None:
        """The newest checkpoint whose learners knew nothing after log time ``known``."""
        found = [m for m in self.manifests() if known is None or m.known <= known]
        return found[-1] if found else None

    def save(self, bank: LearnerBank, offsets: Mapping[int, int], feed_log_time: float) -> Path:
        """Write the bank and the offsets it reflects as one checkpoint; prune old ones."""
        known = max((lr.now for lr in bank.learners.values()), default=0.0)
        known = known if known > float("-inf") else 0.0
        name = f"ckpt-{int(known * 1e6):017d}-{sum(offsets.values()):012d}"
        final = self.directory / name
        previous = self.latest()
        tmp = self.directory / f".tmp-{name}-{os.getpid()}-{time.monotonic_ns()}"
        tmp.mkdir(parents=True)
        shards: dict[str, str] = {}
        for shard, learner in sorted(bank.learners.items()):
            shards[shard] = _file_of(shard)
            old = previous.path / shards[shard] if previous is not None else None
            if shard not in bank.dirty and old is not None and old.exists():
                os.link(old, tmp / shards[shard])
            else:
                checkpoint.save(learner, tmp / shards[shard],
                                {"shard": shard, "sources": bank.sources.get(shard, {}),
                                 "home": bank.home.get(shard)})
        self._write_manifest(tmp, offsets, known, feed_log_time, shards)
        if final.exists():  # same position saved again: nothing new to keep
            shutil.rmtree(tmp)
            return final
        os.replace(tmp, final)
        fsync_dir(self.directory)
        bank.dirty.clear()
        self.prune()
        return final

    @staticmethod
    def _write_manifest(directory: Path, offsets: Mapping[int, int], known: float,
                        feed_log_time: float, shards: Mapping[str, str]) -> None:
        body: dict[str, Any] = {"format": FORMAT, "offsets": {str(p): o for p, o in
                                                              sorted(offsets.items())},
                                "known": known, "feed_log_time": feed_log_time,
                                "shards": dict(shards)}
        path = directory / MANIFEST
        with open(path, "w") as handle:
            json.dump(body, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        fsync_dir(directory)

    def prune(self) -> list[Path]:
        """Drop all but the newest ``keep`` checkpoints (and stale temp dirs)."""
        gone = [m.path for m in self.manifests()[:-self.keep]]
        gone += [p for p in self.directory.glob(".tmp-*") if p.is_dir()]
        gone += [p for p in self.directory.glob(".old-*") if p.is_dir()]
        for path in gone:
            shutil.rmtree(path, ignore_errors=True)
        return gone

    def rewrite(self, manifest: Manifest, bank: LearnerBank) -> Path:
        """Replace a checkpoint's learners by ``bank``'s (same position): used by forgetting.

        Every shard file is written anew (no hard link is shared with another checkpoint), then
        the directory is swapped in; the old one is deleted."""
        tmp = self.directory / f".tmp-{manifest.path.name}-{os.getpid()}-{time.monotonic_ns()}"
        tmp.mkdir(parents=True)
        shards: dict[str, str] = {}
        for shard, learner in sorted(bank.learners.items()):
            shards[shard] = _file_of(shard)
            checkpoint.save(learner, tmp / shards[shard],
                            {"shard": shard, "sources": bank.sources.get(shard, {}),
                             "home": bank.home.get(shard)})
        self._write_manifest(tmp, manifest.offsets, manifest.known, manifest.feed_log_time,
                             shards)
        old = self.directory / f".old-{manifest.path.name}-{time.monotonic_ns()}"
        os.replace(manifest.path, old)
        os.replace(tmp, manifest.path)
        fsync_dir(self.directory)
        shutil.rmtree(old)
        return manifest.path

    def load(self, manifest: Manifest, bank: LearnerBank, device: str = "cpu") -> None:
        """Install the manifest's learners into ``bank`` (replacing what it had)."""
        bank.learners.clear()
        bank.sources.clear()
        bank.home.clear()
        for shard, file in manifest.shards.items():
            restored = checkpoint.load(manifest.path / file, device)
            bank.install(shard, restored.learner, restored.meta.get("sources", {}),
                         restored.meta.get("home"))
        bank.dirty.clear()

    def load_shard(self, manifest: Manifest, shard: str, device: str = "cpu") -> (
        checkpoint.Restored | None
    ):
        file = manifest.shards.get(shard)
        return None if file is None else checkpoint.load(manifest.path / file, device)


def all_groups(root: Path) -> list[CheckpointStore]:
    """The checkpoint stores of every actor group under ``root``."""
    if not root.exists():
        return []
    return [CheckpointStore(d) for d in sorted(root.iterdir()) if d.is_dir()]
