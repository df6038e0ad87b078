"""What the replay's Python workers open: the projector, the DLQ sender, the encoder.

:class:`WriterConfig` is pickled into the job's functions, so it holds only plain values and
module-level callables.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from memstack.foundation.kafka_connect import client_options
from memstack.pipelines.contracts import DeadLetter, ForgetFilter, Projector
from memstack.pipelines.embedding import Encoder, encoder_kind
from memstack.pipelines.replay import writer_mark

if TYPE_CHECKING:
    from memstack.pipelines.commit_path import CommitPath
    from memstack.pipelines.replay.functions import Item
    from memstack.pipelines.stores.bundle import Stores

log = logging.getLogger(__name__)

ProjectorFactory = Callable[["WriterConfig"], Projector]
PrepareKey = Literal["record", "session"]


@dataclass(frozen=True)
class WriterConfig:
    """Everything the workers need; no open resources."""

    into: Path
    topic: str
    bootstrap: str
    dlq_topic: str
    send_dead_letters: bool = True
    commit_batch: int = 1024
    embed_batch: int = 1024
    embed_threads: int = 2
    """Torch threads of each prepare worker: the cores divided among the parallel workers."""
    buckets: int = 4096
    """Keys of the prepare stage: many, so records spread evenly over the subtasks."""
    prepare_key: PrepareKey = "record"
    """How records spread over the prepare subtasks (see ``functions.BucketKey``)."""
    forget: ForgetFilter | None = None
    embed_upstream: bool = True
    """Embed in the parallel prepare stage (off the writer's path); else in the writer."""
    projector_factory: ProjectorFactory | None = None
    keys_dir: Path | None = None
    """The key store of sealed events (crypto-shredding); sealed records need it to be read."""
    encoder: str = field(default_factory=encoder_kind)
    """The encoder (``MEMSTACK_ENCODER`` of the driver), so every worker runs the same one."""


def store_projector(config: WriterConfig) -> Projector:
    """The live pipeline's commit path (no session state, no feed) over ``config.into``; it
    owns the stores: closing it builds the vector indexes and closes them."""
    from memstack.foundation.keystore import FileKeyStore
    from memstack.pipelines.commit_path import CommitPath
    from memstack.pipelines.embedding import make_encoder
    from memstack.pipelines.projector import StoreProjector
    from memstack.pipelines.stores.bundle import Stores

    held = writer_mark.mark(config.into)
    try:
        stores = Stores.open(config.into)
    except BaseException:
        writer_mark.release(held)
        raise
    try:
        # Vectors embedded upstream come with the plan; the writer encodes only the others.
        encoder = make_encoder(config.encoder, threads=config.embed_threads)
        keys = FileKeyStore(config.keys_dir) if config.keys_dir is not None else None
        store = StoreProjector(stores, encoder, config.topic, maintain_indexes=False,
                               keys=keys, forgotten=config.forget)
    except BaseException:
        stores.close()
        writer_mark.release(held)
        raise
    path = CommitPath(store)
    path.on_close = lambda: _close_stores(stores, path, held)
    return path


def _close_stores(stores: Stores, path: CommitPath, held: Path) -> None:
    """After the writer's last batch: build the vector indexes, close the stores, and only
    then drop the writer's mark (:mod:`memstack.pipelines.replay.writer_mark`)."""
    try:
        if not stores.read_only:
            stores.vectors.maintain()
    finally:
        try:
            stores.close()
        finally:
            writer_mark.release(held)
    counts = path.vector_counts
    log.info("replay writer: vectors from upstream %d, embedded in the writer %d",
             counts.given, counts.encoded)


def open_projector(config: WriterConfig) -> Projector:
    factory = config.projector_factory or store_projector
    return factory(config)


class DlqSender:
    """Sends dead letters and returns once the broker acknowledged every one."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from kafka import KafkaProducer

        self.topic = topic
        self._producer = KafkaProducer(**client_options(bootstrap), acks="all",
                                       enable_idempotence=True)

    def send(self, letters: Sequence[DeadLetter]) -> None:
        from memstack.pipelines.dlq import encode

        futures = []
        for letter in letters:
            rec = encode(letter)
            futures.append(self._producer.send(self.topic, key=rec.key, value=rec.value,
                                               headers=rec.headers))
        self._producer.flush()
        for f in futures:
            f.get(timeout=30)

    def close(self) -> None:
        self._producer.close(timeout=10)


class CountingDlq:
    """For rebuilds that must not re-send what the live pipeline already sent: counts only."""

    def __init__(self) -> None:
        self.count = 0

    def send(self, letters: Sequence[DeadLetter]) -> None:
        self.count += len(letters)

    def close(self) -> None:
        log.info("replay: %d dead letter(s) not re-sent (send_dead_letters=False)", self.count)


def open_dlq_sender(config: WriterConfig) -> DlqSender | CountingDlq:
    if not config.send_dead_letters:
        return CountingDlq()
    return DlqSender(config.bootstrap, config.dlq_topic)


def open_encoder(config: WriterConfig) -> Encoder:
    """A loaded encoder for a prepare stage: one the process kept from an earlier job of the
    same kind and threads (a warm service's loopback workers), else a new one."""
    from memstack.pipelines.replay import encoder_pool

    return encoder_pool.lend(config.encoder, config.embed_threads)


def close_encoder(config: WriterConfig, encoder: Encoder) -> None:
    """The prepare stage is done with ``encoder``: the process keeps it for the next job."""
    from memstack.pipelines.replay import encoder_pool

    encoder_pool.give_back(config.encoder, config.embed_threads, encoder)


def embed_items(encoder: Encoder, items: list[Item]) -> list[Item]:
    """Attach the embedding of each kept item's text (the prepare stage parsed it)."""
    from dataclasses import replace

    wanted = [(n, item.text) for n, item in enumerate(items)
              if item.text is not None and not item.forgotten]
    if not wanted:
        return items
    distinct = list(dict.fromkeys(text for _, text in wanted))  # a repeated text: one run
    vectors = dict(zip(distinct, encoder.encode(distinct), strict=True))
    out = list(items)
    for n, text in wanted:
        out[n] = replace(items[n], vector=vectors[text].astype(np.float32).tobytes())
    return out


def upstream_vectors(items: list[Item]) -> dict[str, npt.NDArray[np.float32]]:
    """The vectors the prepare stage embedded for a batch, by text (the plan carries them)."""
    return {i.text: np.frombuffer(i.vector, dtype=np.float32) for i in items
            if i.vector is not None and i.text is not None}
