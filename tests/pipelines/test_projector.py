"""StoreProjector end to end on real stores with the real embedding model (no broker)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memstack.operators.mutations import PutMemory
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.errors import StoreError
from memstack.schemas.events import ForgetScope
from memstack.schemas.ids import uuid7
from tests.pipelines.helpers import TOPIC, at, builder, record, year


def sample_log() -> list[LogRecord]:
    b = builder()
    return [
        record(b.message("s1", "user", "I moved to Lisbon last spring", occurred_at=at(0)), 0),
        record(b.fact("s1", "ana", "lives_in", "Lisbon", valid_from=year(2024)), 1),
        record(b'{"kind": "message", "tenant": "acme"}', 2),
        record(b.tool_call("s1", "weather", "c1", {"city": "Lisbon"}), 0, partition=1),
        record(b.tool_result("s1", "weather", "c1", "sunny, 24 degrees"), 1, partition=1),
        record(b.forget(ForgetScope(type="session", session="s0")), 2, partition=1),
        record(b.fact("s2", "ana", "lives_in", "Porto", valid_from=year(2025)), 3),
        record(b.note("s2", "Ana prefers trains over planes"), 4),
    ]


def project(stores: Stores, encoder: MiniLMEncoder, records: Sequence[LogRecord],
            batch: int) -> None:
    projector = StoreProjector(stores, encoder, TOPIC)
    for i in range(0, len(records), batch):
        projector.commit(projector.prepare(list(records[i:i + batch])))
    projector.close()


def test_records_become_rows_vectors_facts_and_dead_letters(
    tmp_path: Path, minilm: MiniLMEncoder
) -> None:
    log = sample_log()
    with Stores.open(tmp_path / "s") as stores:
        projector = StoreProjector(stores, minilm, TOPIC)
        plan = projector.prepare(log)
        assert [(d.partition, d.offset, d.field) for d in plan.dead_letters] == [(0, 2, "event_id")]
        assert plan.dead_letters[0].value == log[2].value and plan.dead_letters[0].reason
        assert plan.next_offsets == {0: 5, 1: 3}
        projector.commit(plan)

        assert stores.events.applied_offsets(TOPIC) == {0: 5, 1: 3}
        assert stores.events.counts()["records"] == 4  # message, tool call/result, note
        record_row = stores.events.record(plan.events[0].event.event_id)
        assert record_row is not None and record_row.tt == at(0) and record_row.offset == 0
        now = stores.events.facts_as_of("acme", subject="ana", valid=year(2026))
        assert [v.object for v in now] == ["Porto"]
        assert stores.vectors.count() == 4
        texts = [m.row for m in plan.mutations if isinstance(m, PutMemory)]
        stored = stores.vectors.vectors_of([r.memory_id for r in texts])
        expect = minilm.encode([r.text for r in texts])
        np.testing.assert_allclose(stored, expect, atol=1e-5)
        query = minilm.encode(["where does the user live now?"])[0]
        top = stores.vectors.search_vector(query, tenant="acme", k=1)[0]
        assert "Lisbon" in top.row.text and top.row.tt_from == at(0)


def test_redelivered_records_are_skipped_and_change_nothing(
    tmp_path: Path, minilm: MiniLMEncoder
) -> None:
    log = sample_log()
    with Stores.open(tmp_path / "s") as stores:
        project(stores, minilm, log, batch=len(log))
        before = stores.content_hash()
        projector = StoreProjector(stores, minilm, TOPIC)
        assert projector.applied_offsets() == {0: 5, 1: 3}
        plan = projector.prepare(log)
        assert plan.events == [] and plan.mutations == [] and plan.next_offsets == {}
        projector.commit(plan)
        assert stores.content_hash() == before


def test_a_crash_between_lance_and_duckdb_resumes_to_the_clean_result(
    tmp_path: Path, minilm: MiniLMEncoder
) -> None:
    log = sample_log()
    with Stores.open(tmp_path / "clean") as clean:
        project(clean, minilm, log, batch=3)
        want = clean.content_hash()
    stores = Stores.open(tmp_path / "crashed")
    projector = StoreProjector(stores, minilm, TOPIC)
    projector.commit(projector.prepare(log[:3]))
    plan = projector.prepare(log[3:])
    stores.events.close()  # the DuckDB transaction cannot happen: the "crash" after Lance
    with pytest.raises(StoreError):
        projector.commit(plan)
    assert stores.vectors.count() == 4  # Lance already has the batch's rows ...
    stores.close()
    with Stores.open(tmp_path / "crashed") as restarted:
        assert restarted.events.applied_offsets(TOPIC) == {0: 3}  # ... DuckDB does not
        project(restarted, minilm, log, batch=3)  # the engine re-reads from the offsets
        assert restarted.content_hash() == want


def test_fact_state_is_reloaded_from_the_stores_after_a_restart(
    tmp_path: Path, minilm: MiniLMEncoder
) -> None:
    log = sample_log()
    with Stores.open(tmp_path / "one") as one:
        project(one, minilm, log, batch=len(log))
        want = one.content_hashes()
    with Stores.open(tmp_path / "two") as two:
        for i in range(len(log)):  # a new projector (a restart) for every record
            project(two, minilm, log[i:i + 1], batch=1)
        assert two.content_hashes() == want


def test_hostile_records_become_dead_letters_not_a_stopped_worker(
    tmp_path: Path, minilm: MiniLMEncoder
) -> None:
    """Found by ``memstack eval faults``' fuzz run: a record nested deeper than the JSON
    parser's stack raised RecursionError (and a non-string kind TypeError) out of prepare, so
    the live worker stopped on it, and again at every restart (a poison pill)."""
    deep = b'{"a": [' * 5000 + b"1" + b"]}" * 5000
    odd_kind = (b'{"event_id": "%s", "tenant": "acme", "agent": "a", "session": "s", '
                b'"kind": {"o": 1}, "occurred_at": "2026-11-30T12:00:00Z", "payload": {}}'
                % str(uuid7()).encode())
    log = [record(deep, 0), record(odd_kind, 1),
           record(builder().note("s1", "still applied"), 2)]
    with Stores.open(tmp_path / "s") as stores:
        projector = StoreProjector(stores, minilm, TOPIC)
        plan = projector.prepare(log)
        assert [(d.offset, d.field) for d in plan.dead_letters] == [(0, "$"), (1, "kind")]
        assert "nested too deeply" in plan.dead_letters[0].reason
        projector.commit(plan)
        assert stores.events.counts()["records"] == 1
