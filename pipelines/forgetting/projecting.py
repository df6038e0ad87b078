"""A rebuild through the forget ledger, with what it left out counted.

The filter itself is the projector's (:class:`memstack.pipelines.projector.StoreProjector`
with ``keys`` and ``forgotten``): sealed records opened, shredded ones and events the ledger
covers never applied, the offsets moved past them. :func:`rebuild_forgetting` is
:func:`memstack.pipelines.rebuild.rebuild` with the ledger, reporting those counts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from memstack.foundation.keystore import KeyStore
from memstack.operators.relations import RelationRegistry
from memstack.pipelines.embedding import Encoder, shared_encoder
from memstack.pipelines.forgetting.ledger import ForgetLedger
from memstack.pipelines.rebuild import rebuild

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ForgettingRebuild:
    directory: Path
    records: int
    applied: int
    forgotten: int
    shredded: int
    seconds: float
    content_hash: str


def rebuild_forgetting(bootstrap: str, topic: str, into_dir: Path, ledger: ForgetLedger,
                       keys: KeyStore | None = None, *, encoder: Encoder | None = None,
                       registry: RelationRegistry | None = None,
                       batch: int = 2000) -> ForgettingRebuild:
    """Rebuild ``into_dir`` from offset 0 (or where it ends) through the ledger and the keys:
    :func:`memstack.pipelines.rebuild.rebuild`, whose projector holds the one forget filter."""
    result = rebuild(bootstrap, topic, into_dir, batch=batch, encoder=encoder or shared_encoder(),
                     registry=registry, keys=keys, forgotten=ledger)
    log.info("rebuild through the forget ledger: %d records, %d applied, %d forgotten, "
             "%d shredded in %.1f s", result.records, result.events, result.forgotten,
             result.shredded, result.seconds)
    return ForgettingRebuild(result.directory, result.records, result.events, result.forgotten,
                             result.shredded, result.seconds, result.content_hash)
