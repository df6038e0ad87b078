"""The as-of rule's five forms agree on random rows: real DuckDB and real LanceDB running the
generated SQL, the Arrow mask, the numpy mask and the Python predicate select the same rows;
and the event index's fact reads (known a time, a position or a cut) select what the Python
form does.

Times come from a small grid, so rows often sit exactly on a query's coordinate (the
boundaries where ``<`` and ``<=`` differ); interval ends are null about a third of the time.
"""

from __future__ import annotations

import random
from dataclasses import asdict, astuple
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import lancedb
import pyarrow as pa
import pytest

from memstack.foundation.log_coordinates import LogCut, LogPosition
from memstack.operators.mutations import FactEntry, FactVersion, PutFactEntry, PutFactVersion
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.schemas import asof
from memstack.schemas.rows import TIME

GRID = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=h, microseconds=7) for h in range(8)]
ROWS = 300
QUERIES = 60


def _rows(rng: random.Random, cols: asof.Columns) -> pa.Table:
    def maybe() -> datetime | None:
        return None if rng.random() < 0.35 else rng.choice(GRID)

    data: dict[str, list[object]] = {
        "id": list(range(ROWS)),
        cols.vt_from: [rng.choice(GRID) for _ in range(ROWS)],
        cols.vt_to: [maybe() for _ in range(ROWS)],
        cols.tt_from: [rng.choice(GRID) for _ in range(ROWS)],
        cols.partition: [rng.randrange(3) for _ in range(ROWS)],
        cols.offset: [rng.randrange(20) for _ in range(ROWS)],
    }
    types = {cols.partition: pa.int32(), cols.offset: pa.int64(), "id": pa.int64()}
    if cols.tt_to is not None:
        data[cols.tt_to] = [maybe() for _ in range(ROWS)]
    return pa.table({k: pa.array(v, types.get(k, TIME)) for k, v in data.items()})


def _queries(rng: random.Random) -> list[tuple[datetime, asof.Known]]:
    out: list[tuple[datetime, asof.Known]] = []
    for _ in range(QUERIES):
        valid = rng.choice(GRID)
        known: asof.Known
        if rng.random() < 0.1:
            known = None  # the valid half alone
        elif rng.random() < 0.5:
            known = rng.choice(GRID) + rng.choice([timedelta(0), timedelta(minutes=30)])
        else:
            known = LogCut.of({p: rng.randrange(0, 25)
                               for p in rng.sample(range(4), rng.randrange(4))})
        out.append((valid, known))
    return out


@pytest.mark.parametrize("cols", [asof.INTERVALS, asof.RECORDS], ids=["intervals", "records"])
def test_duckdb_lance_arrow_numpy_and_python_select_the_same_rows(cols: asof.Columns,
                                                                  tmp_path: Path) -> None:
    rng = random.Random(20261202)
    table = _rows(rng, cols)
    con = duckdb.connect()
    con.register("rows", table)
    lance = lancedb.connect(tmp_path / "lance").create_table("rows", table)
    python_rows = table.to_pylist()
    held = {name: (asof.micros_of(table.column(name)) if table.schema.field(name).type == TIME
                   else table.column(name).to_numpy()) for name in table.column_names}
    ids = table.column("id").to_numpy()
    selected_sizes = set()
    for valid, known in _queries(rng):
        where, params = asof.duckdb_sql(valid, known, cols)
        by_duckdb = {r[0] for r in con.execute(f"SELECT id FROM rows WHERE {where}",
                                               params).fetchall()}
        found = lance.search().where(asof.lance_sql(valid, known, cols)).select(["id"]).limit(
            ROWS).to_arrow()
        by_lance = set(found.column("id").to_pylist())
        mask = asof.arrow_mask(table, valid, known, cols)
        by_arrow = set(table.filter(mask).column("id").to_pylist())
        by_numpy = set(ids[asof.numpy_mask(held, valid, known, cols)].tolist())
        by_python = {r["id"] for r in python_rows if asof.visible(r, valid, known, cols)}
        assert by_duckdb == by_lance == by_arrow == by_numpy == by_python, (valid, known)
        selected_sizes.add(len(by_python))
    assert len(selected_sizes) > 10  # the queries select varied, non-trivial row sets
    assert 0 in selected_sizes  # and some select nothing (empty cuts, early times)


def test_the_boundaries_are_inclusive_from_and_exclusive_to() -> None:
    t0, t1 = GRID[0], GRID[1]
    row = {"vt_from": t0, "vt_to": t1, "tt_from": t0, "tt_to": t1, "partition": 0, "offset": 4}
    assert asof.visible(row, t0, t0)
    assert not asof.visible(row, t1, t0) and not asof.visible(row, t0, t1)
    assert asof.visible(row, t0, LogCut.of({0: 5})) and not asof.visible(row, t0, LogCut.of({0: 4}))
    assert not asof.visible(row, t0, LogCut.of({1: 99})) and not asof.visible(row, t0, LogCut())


def _position(rng: random.Random) -> LogPosition:
    return LogPosition(rng.choice(GRID[:4]), rng.randrange(2), rng.randrange(12))


def _place(rng: random.Random, at: list[LogPosition]) -> LogPosition:
    """Often at one of ``at`` (the key's entries, as versions open and close), else anywhere."""
    return rng.choice(at) if at and rng.random() < 0.6 else _position(rng)


def _fact_store(rng: random.Random, tmp_path: Path) -> tuple[DuckDBEventIndex, list[FactEntry],
                                                             list[FactVersion]]:
    """Random fact entries and versions (not a real timeline: the rule applies per row) of
    two tenants, on few times and positions so that ties and boundaries are common."""
    keys = [(t, s, r) for t in ("acme", "other") for s in ("ana", "bob") for r in ("at", "is")]
    entries = [FactEntry(f"e{i}", *rng.choice(keys), "x", "assert", GRID[0], None,
                         _position(rng)) for i in range(80)]
    versions = []
    for i in range(ROWS):
        tenant, subject, relation = key = rng.choice(keys)
        at = [e.tt for e in entries if (e.tenant, e.subject, e.relation) == key]
        start, end = _place(rng, at), None if rng.random() < 0.4 else _place(rng, at)
        versions.append(FactVersion(
            f"v{i}", tenant, subject, relation, rng.choice("pqrs"), rng.choice(GRID),
            None if rng.random() < 0.35 else rng.choice(GRID), *astuple(start),
            *(astuple(end) if end else (None, None, None)), f"s{i}",
            None if end is None else f"c{i}"))
    index = DuckDBEventIndex(tmp_path / "facts.duckdb")
    index.apply([*map(PutFactEntry, entries), *map(PutFactVersion, versions)], {}, topic="t")
    return index, entries, versions


def _fact_queries(rng: random.Random) -> list[tuple[datetime, asof.Known]]:
    out: list[tuple[datetime, asof.Known]] = []
    for valid, known in _queries(rng):
        if known is None:
            known = _position(rng)  # the position form takes the place of the valid half
        out.append((valid, known))
    return out


def _with_first(row: dict[str, object], entries: list[FactEntry],
                known: asof.Known) -> dict[str, object]:
    """``row`` with its key's earliest entry outside the cut (the columns of ``asof.FIRST``)."""
    outside = [e.tt for e in entries if isinstance(known, LogCut)
               and (e.tenant, e.subject, e.relation) == (row["tenant"], row["subject"],
                                                         row["relation"])
               and not known.knows(e.tt.partition, e.tt.offset)]
    first = min(outside, default=None)
    return row | dict(zip((asof.FIRST.time, asof.FIRST.partition, asof.FIRST.offset),
                          astuple(first) if first else (None, None, None), strict=True))


def test_the_stores_fact_reads_select_what_the_python_rule_does(tmp_path: Path) -> None:
    """``facts_as_of`` and ``fact_history`` (DuckDB, known a time, a position or a cut) against
    the rule's Python form, the cut's per-key ``first`` computed here from the entries."""
    rng = random.Random(20261203)
    index, entries, versions = _fact_store(rng, tmp_path)
    selected = set()
    try:
        for valid, known in _fact_queries(rng):
            assert known is not None
            rows = [_with_first(asdict(v), entries, known) for v in versions
                    if v.tenant == "acme"]
            matches = asof.matcher(valid, known, asof.VERSIONS)
            wanted = sorted((r["subject"], r["relation"], r["vt_from"], r["object"],
                             r["version_id"]) for r in rows if matches(r))
            got = index.facts_as_of("acme", valid=valid, known=known)
            assert sorted((v.subject, v.relation, v.vt_from, v.object, v.version_id)
                          for v in got) == wanted, (valid, known)
            assert [w[:4] for w in wanted] == [(v.subject, v.relation, v.vt_from, v.object)
                                               for v in got]  # in the primitive's order
            selected.add(len(wanted))
            seen, still_open = map(asof.clause_matcher, ([c] for c in asof.known_clauses(
                known, asof.VERSIONS)))
            by_id = {v.version_id: v for v in versions}
            history = [(r["version_id"], r["tt_to"] if still_open(r) is False else None)
                       for r in rows if r["subject"] == "ana" and seen(r)]
            got_history = index.fact_history("acme", "ana", known=known)
            assert sorted(history, key=str) == sorted(
                ((v.version_id, v.tt_to) for v in got_history), key=str), known
            assert all(v == by_id[v.version_id] or v == by_id[v.version_id].reopened()
                       for v in got_history)
    finally:
        index.close()
    assert len(selected) > 10 and 0 in selected
