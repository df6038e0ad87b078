"""The resident index's rows (:class:`memstack.view.resident.rows.ResidentRows`, pure Arrow):
a row blanked after a forget keeps the held schema, so a read across runs, and the merge of
runs, still works (a search after a forget answered 500 when its rows spanned a blanked run
and another: ``concat_tables`` found ``text: string`` against ``text: string not null``);
and the rows that answer as of, by the held columns, are those the rule's Arrow form selects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from memstack.schemas.rows import memories_schema
from memstack.view.resident.rows import COLUMNS, ResidentRows

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _table(lo: int, hi: int) -> pa.Table:
    schema = pa.schema([memories_schema().field(n) for n in COLUMNS])
    return pa.Table.from_pylist([{
        "memory_id": f"m{i}", "event_id": f"m{i}", "tenant": "acme", "session": f"s{i % 3}",
        "subject": None, "kind": "message", "text": f"text {i}", "vt_from": T0 + timedelta(i),
        "vt_to": None, "tt_from": T0, "tt_to": None, "partition": 0, "offset": i,
        "metadata_json": "{}"} for i in range(lo, hi)], schema=schema)


def test_blanked_rows_keep_the_schema_across_runs_and_merges() -> None:
    rows = ResidentRows()
    rows.append(_table(0, 100))
    rows.append(_table(100, 110))  # a second run (too small to merge into the first)
    schema = rows.take([0]).schema
    rows.alive.view()[[5, 105]] = False
    rows.blank(np.asarray([5, 105], dtype=np.int64))
    both = rows.take([105, 3, 5, 107])  # across the two runs
    assert both.schema == schema
    assert both.column("text").to_pylist() == ["", "text 3", "", "text 107"]
    assert both.column("metadata_json").to_pylist() == ["{}"] * 4
    rows.append(_table(110, 200))  # merges the runs, the blanked ones among them
    assert rows.take([5, 150]).column("text").to_pylist() == ["", "text 150"]


def test_the_rows_that_answer_as_of_are_the_arrow_rules_over_the_held_rows() -> None:
    """:meth:`ResidentRows.answering` (the rule's numpy form over the held columns) selects
    what the rule's Arrow form selects over the same rows read back, for times and cuts."""
    from memstack.foundation.log_coordinates import LogCut
    from memstack.schemas import asof

    rng = np.random.default_rng(7)
    table = _table(0, 400)
    ends = [None if rng.random() < 0.4 else T0 + timedelta(int(rng.integers(0, 400)))
            for _ in range(400)]
    table = table.set_column(table.schema.get_field_index("vt_to"), "vt_to",
                             pa.array(ends, table.schema.field("vt_to").type))
    table = table.set_column(table.schema.get_field_index("tt_to"), "tt_to",
                             pa.array(ends[::-1], table.schema.field("tt_to").type))
    table = table.set_column(table.schema.get_field_index("partition"), "partition",
                             pa.array(rng.integers(0, 3, 400), pa.int32()))
    rows = ResidentRows()
    rows.append(table.slice(0, 250))
    rows.append(table.slice(250))
    everything = np.arange(400, dtype=np.int64)
    held = rows.take(everything)
    chosen = set()
    for valid, known in [(T0 + timedelta(100), T0 + timedelta(50)),
                         (T0 + timedelta(300), T0 + timedelta(399)),
                         (T0 + timedelta(200), LogCut.of({0: 150, 2: 390})),
                         (T0 + timedelta(399), None)]:
        want = held.filter(asof.arrow_mask(held, valid, known)).column("_rowid").to_pylist()
        got = everything[rows.answering(everything, valid, known)].tolist()
        assert got == want
        chosen.add(len(got))
    assert len(chosen) == 4 and 0 not in chosen  # the cases select different, non-empty sets


def test_memory_rows_are_the_rows_read_through_arrow() -> None:
    """:meth:`ResidentRows.memory_rows` (built from the codes and times held) gives what
    ``to_memories`` gives over the same rows taken as Arrow: nulls (subject, open ends),
    metadata, several runs and sessions, a blanked row."""
    from memstack.pipelines.stores.arrow import to_memories

    rng = np.random.default_rng(3)
    table = _table(0, 300)
    ends = [None if rng.random() < 0.5 else T0 + timedelta(int(rng.integers(0, 300)),
                                                               microseconds=int(rng.integers(999)))
            for _ in range(300)]
    table = table.set_column(table.schema.get_field_index("vt_to"), "vt_to",
                             pa.array(ends, table.schema.field("vt_to").type))
    table = table.set_column(table.schema.get_field_index("subject"), "subject",
                             pa.array([None if i % 4 else f"who{i % 7}" for i in range(300)]))
    table = table.set_column(table.schema.get_field_index("metadata_json"), "metadata_json",
                             pa.array(["{}" if i % 3 else f'{{"n": {i}, "tags": ["a", "b"]}}'
                                       for i in range(300)]))
    rows = ResidentRows()
    for lo, hi in [(0, 170), (170, 200), (200, 300)]:
        rows.append(table.slice(lo, hi - lo))
    rows.alive.view()[[9]] = False
    rows.blank(np.asarray([9], dtype=np.int64))
    at = np.asarray([*rng.permutation(300)[:120].tolist(), 9, 9], dtype=np.int64)
    got = rows.memory_rows(at)
    want = to_memories(rows.take(at))
    assert got == want
    assert [r.memory_id for r in got] == [f"m{p}" for p in at.tolist()]
    assert {r.subject is None for r in got} == {True, False}
    assert any(r.metadata for r in got) and any(r.vt_to is not None for r in got)
