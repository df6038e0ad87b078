"""The eraser forgets in the stores there are when it erases, as the store thread does.

The deployed processor decides when it is built which stores forget: the consolidated weights
join once ``$MEMSTACK_HOME/consolidation/checkpoints`` exists (``jobs.forget.processor_for``).
The store thread builds one per batch of requests; the eraser built one when its thread
started and kept it, so a worker started before consolidation's first checkpoint erased and
audited every later request without the weights, marked it applied, and no restart took it
again: the weights kept the forgotten facts for good.

Real DuckDB and LanceDB files, the real projector, learners and checkpoints, the real MiniLM.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from memstack.pipelines.consolidation.bank import LearnerBank
from memstack.pipelines.consolidation.checkpoints import CheckpointStore, all_groups
from memstack.pipelines.consolidation.distill import Distiller, StoreTeacher, reference_centre
from memstack.pipelines.consolidation.feed import feed_items
from memstack.pipelines.consolidation.forget import ConsolidationForgetStore
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.forgetting.bundle import ForgetStores
from memstack.pipelines.forgetting.contract import Forgettable
from memstack.pipelines.forgetting.eraser import Eraser
from memstack.pipelines.forgetting.in_worker import LiveForgetting
from memstack.pipelines.forgetting.ledger import ForgetLedger
from memstack.pipelines.forgetting.processor import ForgetOutcome, ForgetProcessor
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.bundle import Stores
from tests.consolidation.givens import SMALL
from tests.forget.test_two_phase import BUILDER, FORGET_TOPIC, TOPIC, record


def consolidated_ids(root: Path, centre: torch.Tensor) -> set[str]:
    """The source events of every item the latest checkpoints' learners hold."""
    out: set[str] = set()
    for group in all_groups(root):
        manifest = group.latest()
        if manifest is not None:
            bank = LearnerBank(SMALL, centre)
            group.load(manifest, bank)
            out |= {src for sources in bank.sources.values() for src in sources.values()}
    return out


def test_the_weights_forget_when_they_joined_after_the_eraser_started(
        tmp_path: Path, minilm: MiniLMEncoder) -> None:
    root = tmp_path / "consolidation" / "checkpoints"
    projector = StoreProjector(Stores.open(tmp_path / "stores"), minilm, TOPIC,
                               forgotten=ForgetLedger())
    eraser_built = threading.Event()

    def processor_for(stores: ForgetStores) -> ForgetProcessor:
        """As ``jobs.forget.processor_for``: the weights forget once their checkpoints exist."""
        extra: list[Forgettable] = []
        if root.exists():
            extra.append(ConsolidationForgetStore(
                root, Distiller(StoreTeacher(stores.duckdb.index, minilm)),
                events=lambda: stores.duckdb.index))
        if threading.current_thread().name == "memstack-eraser":
            eraser_built.set()
        return ForgetProcessor(stores, encoder=minilm, extra=extra,
                               outcomes_dir=tmp_path / "forget")

    forgetting = LiveForgetting(tmp_path / "stores", projector, ForgetLedger(), processor_for)
    outcomes: list[ForgetOutcome] = []
    forgetting.eraser = Eraser(forgetting.erasing_processor, on_erased=outcomes.append,
                               exclusive=forgetting.exclusive).start()
    try:
        assert eraser_built.wait(60)  # the worker runs, consolidation has not checkpointed yet

        events = [BUILDER.fact("s1", "user:ana", "lives_in", "Lisbon"),
                  BUILDER.fact("s1", "user:bob", "lives_in", "Faro"),
                  BUILDER.message("s1", "user", "We talked about the regatta in Cascais")]
        records = [record(e.to_json(), n) for n, e in enumerate(events)]
        plan = projector.prepare(records)
        projector.commit(plan)
        centre = reference_centre(minilm)  # then consolidation checkpoints its first bank
        bank = LearnerBank(SMALL, centre)
        bank.apply(Distiller(StoreTeacher(projector.stores.events, minilm)).records(
            feed_items(plan.mutations)), partition=0)
        CheckpointStore(root / "p0").save(bank, {0: len(events)}, float(len(events)))
        lisbon = events[0].event_id
        assert lisbon in consolidated_ids(root, centre)

        forget = BUILDER.forget({"type": "event", "event_id": lisbon}, reason="test")
        forgetting.apply_all([record(forget.to_json(), 0, FORGET_TOPIC)])
        assert forgetting.eraser.wait_idle(180)

        assert [o.request.request_id for o in outcomes] == [forget.event_id]
        assert lisbon not in consolidated_ids(root, centre)  # the weights forgot it
        assert events[1].event_id in consolidated_ids(root, centre)
        audit = outcomes[0].audit  # and the audit that marked it applied looked there
        assert audit.passed and "consolidation" in audit.table(), audit.table()
    finally:
        forgetting.close(drain_s=0.0)
        projector.stores.close()

