"""Where sharded deployments keep their shards and how workers announce themselves.

A sharded deployment has one root directory (``--stores``, default
``$MEMSTACK_HOME/stores/sharded``)::

    <root>/shards/p<partition>/     one stores directory (DuckDB + LanceDB) per partition of
                                    <prefix>.events; its ``offsets`` table names that partition
    <root>/workers/<worker>.json    a worker's card: {"worker", "url", "pid", "host"}

A shard is the unit that moves: whichever worker Kafka assigns partition ``p`` opens
``shards/p<p>`` and resumes from the offset committed in it. The number of workers therefore
never changes what is stored, only who holds it. The cards only say where workers listen; the
router asks every worker which partitions it owns (its answer, not the card, is the truth).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from memstack.foundation.processes import pid_alive

SHARDS = "shards"
WORKERS = "workers"


def shard_dir(root: Path, partition: int) -> Path:
    """The stores directory of one partition's shard."""
    return Path(root) / SHARDS / f"p{int(partition)}"


def shard_partitions(root: Path) -> list[int]:
    """The partitions that have a shard directory under ``root``."""
    base = Path(root) / SHARDS
    if not base.is_dir():
        return []
    return sorted(int(d.name[1:]) for d in base.iterdir()
                  if d.is_dir() and d.name.startswith("p") and d.name[1:].isdigit())


@dataclass(frozen=True)
class WorkerCard:
    """Where one worker's shard API listens."""

    worker: str
    url: str
    pid: int
    host: str

    @classmethod
    def here(cls, worker: str, url: str) -> WorkerCard:
        return cls(worker, url, os.getpid(), socket.gethostname())


def card_path(root: Path, worker: str) -> Path:
    return Path(root) / WORKERS / f"{worker}.json"


def write_card(root: Path, card: WorkerCard) -> Path:
    """Publish ``card`` atomically (write, then rename)."""
    path = card_path(root, card.worker)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(card)))
    os.replace(tmp, path)
    return path


def read_cards(root: Path) -> list[WorkerCard]:
    """Every card under ``root``; on this host, cards whose process is gone are skipped."""
    base = Path(root) / WORKERS
    cards: list[WorkerCard] = []
    for path in sorted(base.glob("*.json")) if base.is_dir() else []:
        try:
            card = WorkerCard(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue  # being replaced, or not a card
        if card.host == socket.gethostname() and not pid_alive(card.pid):
            continue
        cards.append(card)
    return cards

