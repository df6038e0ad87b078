"""Forgetting that holds: the ledger, resolution, per-store erasure, the processor, the audit.

See docs/forget.md. Pure scope logic lives in :mod:`memstack.operators.forget`.
"""

from memstack.pipelines.forgetting.audit import AuditReport, audit
from memstack.pipelines.forgetting.bundle import ForgetStores
from memstack.pipelines.forgetting.contract import (
    AuditProbe,
    ForgetReport,
    Forgettable,
    Residual,
)
from memstack.pipelines.forgetting.duckdb_store import DuckDBForgetStore
from memstack.pipelines.forgetting.lance_store import LanceForgetStore
from memstack.pipelines.forgetting.ledger import ForgetLedger
from memstack.pipelines.forgetting.lineage import KafkaLineage, Lineage, StaticLineage
from memstack.pipelines.forgetting.processor import ForgetOutcome, ForgetProcessor
from memstack.pipelines.forgetting.projecting import ForgettingRebuild, rebuild_forgetting
from memstack.pipelines.forgetting.resolve import resolve

__all__ = [
    "AuditProbe", "AuditReport", "DuckDBForgetStore", "ForgetLedger", "ForgetOutcome",
    "ForgetProcessor", "ForgetReport", "ForgetStores", "Forgettable", "ForgettingRebuild",
    "KafkaLineage", "LanceForgetStore", "Lineage", "Residual", "StaticLineage", "audit",
    "rebuild_forgetting", "resolve",
]
