"""The forget deployable: emit a request, apply the ledger to offline stores, audit a request."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from memstack.client import MemoryClient
from memstack.foundation.errors import MemstackError
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.pipelines.embedding import shared_encoder
from memstack.pipelines.forgetting import (
    AuditReport,
    ForgetLedger,
    ForgetOutcome,
    ForgetProcessor,
    ForgetStores,
    KafkaLineage,
)
from memstack.pipelines.forgetting.contract import Forgettable
from memstack.pipelines.forgetting.keys import rotate_before_request
from memstack.pipelines.forgetting.processor import apply_pending
from memstack.pipelines.forgetting.resolve import resolve
from memstack.pipelines.stores.bundle import stores_dir
from memstack.schemas.events import Event, ForgetScope

if TYPE_CHECKING:
    from memstack.pipelines.forgetting.session_state_store import StateStoreFor

log = logging.getLogger(__name__)


class UnknownForgetRequestError(MemstackError):
    """No request with that id in the forget ledger; list them with `memstack forget list`."""


def request(settings: Settings, tenant: str, scope: ForgetScope, reason: str | None) -> Event:
    """Retire the scope's data keys (if this machine holds the key store), then emit."""
    if settings.keys_dir.exists():
        retired = rotate_before_request(FileKeyStore(settings.keys_dir), tenant, scope)
        log.info("retired %d data key(s) of the scope before emitting (the forget destroys "
                 "them when it is applied)", len(retired))
    with MemoryClient(tenant, "memstack-cli", settings=settings, source="memstack-forget") as c:
        event = c.events.forget(scope, reason=reason)
        c.emit(event).get()
    return event


def processor_for(settings: Settings, stores: ForgetStores,
                  lineage: KafkaLineage | None = None) -> ForgetProcessor:
    """The deployment's processor over ``stores``; ``lineage``: one kept across calls (else a
    new one, which reads the whole events topic on its first resolution)."""
    keys = FileKeyStore(settings.keys_dir)
    return ForgetProcessor(stores, keys=keys,
                           lineage=lineage or log_lineage(settings, keys),
                           encoder=shared_encoder(), outcomes_dir=settings.home / "forget",
                           extra=_weight_stores(settings, stores))


def log_lineage(settings: Settings, keys: FileKeyStore | None = None) -> KafkaLineage:
    """The lineage of the deployment's events topic (payloads opened with its key store)."""
    return KafkaLineage(settings.bootstrap, settings.events_topic,
                        keys or FileKeyStore(settings.keys_dir))


def _weight_stores(settings: Settings, stores: ForgetStores) -> list[Forgettable]:
    """The consolidated weights forget too, when this deployment runs consolidation."""
    from memstack.pipelines.consolidation.distill import Distiller, StoreTeacher
    from memstack.pipelines.consolidation.feed import Sharding
    from memstack.pipelines.consolidation.forget import ConsolidationForgetStore
    from memstack.pipelines.consolidation.job import checkpoint_root

    root = checkpoint_root(settings)
    if not root.exists():
        return []
    teacher = StoreTeacher(stores.duckdb.index, shared_encoder())
    return [ConsolidationForgetStore(root, Distiller(teacher), sharding=Sharding.from_env(),
                                     events=lambda: stores.duckdb.index)]


def apply(settings: Settings, into: Path | None = None) -> list[ForgetOutcome]:
    """Apply every request of the ledger the stores have not applied (stores not in use).

    The live worker's session state forgets too: a worker skips requests its stores already
    applied, so the state would otherwise keep the forgotten terms.
    """
    ledger = ForgetLedger.load(settings.bootstrap, settings.forget_topic)
    with ForgetStores(into or stores_dir(settings)) as stores, _session_state(settings) as state:
        processor = processor_for(settings, stores)
        if state is not None:
            processor.extra.append(state(stores, processor.lineage))
        return apply_pending(processor, ledger.requests)


def _session_state(settings: Settings) -> AbstractContextManager[StateStoreFor | None]:
    """The live worker's session states (its Faust table's changelog), when it keeps some."""
    from memstack.pipelines.faust_app import group_id
    from memstack.pipelines.forgetting.session_state_store import changelog_forgetting
    from memstack.pipelines.session_state.table import changelog_topic

    return changelog_forgetting(settings.bootstrap, changelog_topic(group_id(settings)),
                                shared_encoder())


def audit(settings: Settings, request_id: str, into: Path | None = None) -> AuditReport:
    """Audit one request now: ids along lineage, the log, and any text still readable."""
    ledger = ForgetLedger.load(settings.bootstrap, settings.forget_topic)
    found = ledger.get(request_id)
    if found is None:
        raise UnknownForgetRequestError(
            f"no forget request {request_id} in {settings.forget_topic}; check the id printed "
            "by `memstack forget ...`")
    with ForgetStores(into or stores_dir(settings)) as stores, _session_state(settings) as state:
        processor = processor_for(settings, stores)
        if state is not None:
            processor.extra.append(state(stores, processor.lineage))
        resolved = resolve(found, stores.duckdb.index, stores.lance.index, processor.lineage,
                           processor.registry)
        return processor.audit(processor.probe(resolved))
