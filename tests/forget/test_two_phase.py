"""Forgetting in two phases in the live worker: hidden at once on the store thread, erased and
audited by the eraser thread while ingest goes on, restart-safe.

Real DuckDB and LanceDB files, the real projector and the real MiniLM model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.operators.log import LogPosition
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.forgetting.auditor import Auditor
from memstack.pipelines.forgetting.bundle import APPLIED_FILE, ForgetStores
from memstack.pipelines.forgetting.contract import files_containing
from memstack.pipelines.forgetting.eraser import Eraser
from memstack.pipelines.forgetting.in_worker import LiveForgetting
from memstack.pipelines.forgetting.ledger import ForgetLedger
from memstack.pipelines.forgetting.phases import read_status
from memstack.pipelines.forgetting.processor import ForgetOutcome, ForgetProcessor
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.bundle import Stores

TOPIC, FORGET_TOPIC = "t.events", "t.forget"
SECRETS = ["Ana is allergic to penicillin and carries an epipen",
           "Bob keeps bees on the roof of his Faro apartment",
           "Reminder: renew the passport before the trip to Japan"]
KEPT = "We talked about the quarterly sailing regatta in Cascais"
BUILDER = EventBuilder(Defaults(tenant="acme", agent="a", source="test"))


def record(value: bytes, offset: int, topic: str = TOPIC) -> LogRecord:
    return LogRecord(topic, None, value, LogPosition(datetime.now(UTC), 0, offset), 0)


class Worker:
    """The live worker's forget path over real stores (what pipelines/forget_agent.py runs)."""

    def __init__(self, directory: Path, minilm: MiniLMEncoder, *, eraser: bool = True) -> None:
        self.directory = directory
        self.outcomes = directory.parent / "forget"
        ledger = ForgetLedger()
        self.projector = StoreProjector(Stores.open(directory), minilm, TOPIC, forgotten=ledger)
        self.forgetting = LiveForgetting(directory, self.projector, ledger, self._processor)
        self.eraser = Eraser(self.forgetting.erasing_processor,
                             exclusive=self.forgetting.exclusive)
        self.forgetting.eraser = self.eraser if eraser else None
        self.minilm = minilm
        self.offset = 0

    def _processor(self, stores: ForgetStores) -> ForgetProcessor:
        return ForgetProcessor(stores, encoder=self.minilm, outcomes_dir=self.outcomes)

    def write(self, texts: list[str]) -> list[str]:
        events = [BUILDER.message("s1", "user", t) for t in texts]
        records = []
        for event in events:
            records.append(record(event.to_json(), self.offset))
            self.offset += 1
        self.projector.commit(self.projector.prepare(records))
        return [e.event_id for e in events]

    def forget_record(self, event_id: str, offset: int) -> tuple[LogRecord, str]:
        event = BUILDER.forget({"type": "event", "event_id": event_id}, reason="test")
        return record(event.to_json(), offset, FORGET_TOPIC), event.event_id

    def visible(self, text: str) -> bool:
        stores = self.projector.stores
        in_records = any(r.text == text for r in stores.events.records("acme"))
        hits = stores.vectors.search_text(text, tenant="acme", k=10)
        return in_records or any(h.row.text == text for h in hits)

    def files_with(self, texts: list[str]) -> dict[str, int]:
        files = [str(p) for p in self.directory.rglob("*") if p.is_file()]
        return files_containing(files, [t.encode() for t in texts])

    def applied(self) -> set[str]:
        path = self.directory / APPLIED_FILE
        return set(json.loads(path.read_text())) if path.exists() else set()

    def close(self) -> None:
        self.eraser.close(drain_s=0.0)
        self.projector.stores.close()


@pytest.fixture
def worker(tmp_path: Path, minilm: MiniLMEncoder) -> Iterator[Worker]:
    w = Worker(tmp_path / "stores", minilm)
    yield w
    w.close()


def test_hidden_at_once_then_erased_in_the_background_while_ingest_goes_on(
        worker: Worker) -> None:
    ids = worker.write([KEPT, *SECRETS])
    forget, request_id = worker.forget_record(ids[1], 0)
    hidden = worker.forgetting.apply(forget)
    assert hidden is not None and worker.forgetting.next_offsets == {0: 1}

    # logical phase: no read returns it, the bytes are still on disk (the eraser's work)
    assert not worker.visible(SECRETS[0]) and worker.visible(KEPT)
    assert worker.files_with([SECRETS[0]]), "a Lance delete only writes a deletion file"
    status = read_status(worker.outcomes, request_id)
    assert status is not None and status["status"] == "invisible"
    assert request_id not in worker.applied()

    later = worker.write(["The garden hose leaks near the shed"])  # ingest goes on
    worker.eraser.start()
    assert worker.eraser.wait_idle(180)
    status = read_status(worker.outcomes, request_id)
    assert status is not None and status["status"] == "audited" and status["passed"] is True
    assert list(status["phases"]) == ["logged", "invisible", "erased", "audited"]
    assert not worker.files_with([SECRETS[0]])
    assert request_id in worker.applied()
    assert worker.visible(KEPT) and worker.visible(SECRETS[1])
    assert later[0] in {r.event_id for r in worker.projector.stores.events.records("acme")}


def test_requests_hidden_together_are_erased_in_one_pass(worker: Worker) -> None:
    ids = worker.write([KEPT, *SECRETS])
    requests = []
    for i, event_id in enumerate(ids[1:]):
        forget, request_id = worker.forget_record(event_id, i)
        worker.forgetting.apply(forget)
        requests.append(request_id)
    assert worker.eraser.waiting == 3
    worker.eraser.start()
    assert worker.eraser.wait_idle(180)
    assert worker.eraser.passes == 1
    assert set(requests) <= worker.applied()
    assert not worker.files_with(SECRETS) and worker.visible(KEPT)


def test_a_restart_erases_what_was_hidden_but_not_erased(tmp_path: Path,
                                                        minilm: MiniLMEncoder) -> None:
    first = Worker(tmp_path / "stores", minilm)
    ids = first.write([KEPT, *SECRETS])
    forget, request_id = first.forget_record(ids[2], 0)
    first.forgetting.apply(forget)
    first.close()  # stopped before its eraser ran: hidden, not erased, not applied
    assert first.files_with([SECRETS[1]])

    again = Worker(tmp_path / "stores", minilm)  # the ledger is read again from the start
    try:
        assert again.forgetting.apply(forget) is not None  # not applied yet: hidden again
        again.eraser.start()
        assert again.eraser.wait_idle(180)
        assert request_id in again.applied()
        # the content was no longer known (resolved from stores that had hidden it), yet
        # the purge removes it: it works from what the logical phase left on disk
        assert not again.files_with([SECRETS[1]])
        assert again.visible(KEPT) and not again.visible(SECRETS[1])
    finally:
        again.close()


def test_without_an_eraser_requests_taken_together_are_erased_in_one_pass(
        tmp_path: Path, minilm: MiniLMEncoder) -> None:
    """The worker's default: the forget agent hands a batch of requests to the store thread,
    which hides each and then erases and audits them all in one pass of every store."""
    worker = Worker(tmp_path / "stores", minilm, eraser=False)
    outcomes = []
    worker.forgetting.on_erased = outcomes.append
    try:
        ids = worker.write([KEPT, *SECRETS])
        records = [worker.forget_record(event_id, i) for i, event_id in enumerate(ids[1:])]
        taken = [r for r, _ in records] + [records[0][0]]  # one read twice (a rebalance)
        hidden = worker.forgetting.apply_all(taken)
        assert [h is not None for h in hidden] == [True, True, True, False]
        assert worker.forgetting.next_offsets == {0: 3}
        assert sorted(o.request.request_id for o in outcomes) == sorted(i for _, i in records)
        for outcome in outcomes:
            assert outcome.audit.passed
            physical = {r.store: r.physical for r in outcome.reports}
            assert physical["duckdb"]["batch"] == physical["lancedb"]["batch"] == 3.0
        assert {i for _, i in records} <= worker.applied()
        assert not worker.files_with(SECRETS) and worker.visible(KEPT)
        for _, request_id in records:
            status = read_status(worker.outcomes, request_id)
            assert status is not None and status["status"] == "audited"
    finally:
        worker.close()


def test_without_an_eraser_the_audits_run_in_the_background(tmp_path: Path,
                                                            minilm: MiniLMEncoder) -> None:
    """The worker's default set-up: the store thread hides and purges the batch (no byte left
    when ``apply_all`` returns) and an :class:`Auditor` thread audits and marks it applied."""
    worker = Worker(tmp_path / "stores", minilm, eraser=False)
    outcomes: list[ForgetOutcome] = []
    worker.forgetting.on_erased = outcomes.append
    worker.forgetting.auditor = Auditor(on_audited=worker.forgetting.audited,
                                        exclusive=worker.forgetting.serial)
    try:
        ids = worker.write([KEPT, *SECRETS])
        records = [worker.forget_record(event_id, i) for i, event_id in enumerate(ids[1:3])]
        worker.forgetting.apply_all([r for r, _ in records])
        assert not worker.files_with(SECRETS[:2]) and worker.visible(KEPT)  # purged already
        assert worker.forgetting.auditor.wait_idle(180)
        assert sorted(o.request.request_id for o in outcomes) == sorted(i for _, i in records)
        assert all(o.audit.passed for o in outcomes)
        assert {i for _, i in records} <= worker.applied()
        for _, request_id in records:
            status = read_status(worker.outcomes, request_id)
            assert status is not None and status["status"] == "audited"
            assert list(status["phases"]) == ["logged", "invisible", "erased", "audited"]
    finally:
        worker.forgetting.close(drain_s=0.0)
        worker.close()
