"""Reading what a history left, with the service stopped: the checker's evidence.

- per event id, the rows of DuckDB ``records`` and ``fact_entries`` and LanceDB ``memories``
  (counted with GROUP BY, so a duplicate shows even where a key should forbid it);
- per event id, the copies in the events topic (envelopes are plain JSON; payloads sealed);
- the forgotten marker tokens still present: in any row's text or payload of the stores
  (and of any other stores directory given, e.g. a replay's), and in the raw bytes of every
  file under the stores, the broker's log directory and the service's home;
- a clean rebuild of the log into a fresh directory, compared with ``memstack verify``'s
  comparison (content hashes store by store).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import duckdb
import lancedb

from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.jobs.eval.faults.checker import StoreSnapshot
from memstack.pipelines.forgetting.bundle import APPLIED_FILE
from memstack.pipelines.forgetting.ledger import ForgetLedger
from memstack.pipelines.log_reader import end_offsets, read_bounded
from memstack.pipelines.rebuild import rebuild
from memstack.pipelines.replay.verify import Comparison, compare
from memstack.pipelines.stores.lance_index import TABLE
from memstack.pipelines.stores.layout import DUCKDB_FILE, LANCE_DIR

log = logging.getLogger(__name__)

SKIPPED_SUFFIXES = (".log", ".out", ".lock", ".pid")
"""Our own logs (and the broker's) are not stores; they never hold payload text."""


def snapshot(settings: Settings, stores: Path, tokens: Iterable[str],
             extra_stores: Iterable[Path] = (), raw_roots: Iterable[Path] = ()) -> StoreSnapshot:
    wanted = sorted(set(tokens))
    records, facts, texts = _duckdb(stores)
    memories, memory_texts = _lance(stores)
    found = {t for t in wanted if any(t in text for text in texts + memory_texts)}
    for other in extra_stores:
        if (other / DUCKDB_FILE).exists():
            found |= {t for t in wanted if any(t in x for x in _duckdb(other)[2]
                                               + _lance(other)[1])}
    found |= raw_tokens([stores, *extra_stores, *raw_roots], wanted)
    return StoreSnapshot(records, facts, memories, log_copies(settings), frozenset(found))


def _duckdb(stores: Path) -> tuple[dict[str, int], dict[str, int], list[str]]:
    con = duckdb.connect(str(stores / DUCKDB_FILE), read_only=True)
    try:
        records = dict(con.execute(
            "SELECT event_id, count(*) FROM records GROUP BY event_id").fetchall())
        facts = dict(con.execute(
            "SELECT event_id, count(*) FROM fact_entries GROUP BY event_id").fetchall())
        texts = [str(v) for row in con.execute(
            "SELECT coalesce(text, ''), coalesce(payload_json, '') FROM records").fetchall()
            for v in row]
        texts += [str(r[0]) for r in con.execute(
            "SELECT coalesce(object, '') FROM fact_entries").fetchall()]
        texts += [str(r[0]) for r in con.execute(
            "SELECT coalesce(object, '') FROM fact_versions").fetchall()]
    finally:
        con.close()
    return records, facts, texts


def _lance(stores: Path) -> tuple[dict[str, int], list[str]]:
    db = lancedb.connect(stores / LANCE_DIR)
    if TABLE not in db.table_names():
        return {}, []
    table = db.open_table(TABLE).to_arrow().select(["event_id", "text"])
    ids = table.column("event_id").to_pylist()
    return dict(Counter(str(i) for i in ids)), [str(t) for t in table.column("text").to_pylist()]


def behind_log(settings: Settings, stores: Path) -> dict[int, int]:
    """Per partition, records of the events topic the (stopped) stores have not applied."""
    con = duckdb.connect(str(stores / DUCKDB_FILE), read_only=True)
    try:
        applied = dict(con.execute("SELECT partition, next_offset FROM offsets WHERE topic = ?",
                                   [settings.events_topic]).fetchall())
    finally:
        con.close()
    ends = end_offsets(settings.bootstrap, settings.events_topic)
    return {p: e - applied.get(p, 0) for p, e in ends.items() if e > applied.get(p, 0)}


def unapplied_forgets(settings: Settings, stores: Path) -> list[str]:
    """Requests of the forget ledger the (stopped) stores have not applied yet (their ids)."""
    path = stores / APPLIED_FILE
    applied = set(json.loads(path.read_text())) if path.exists() else set()
    ledger = ForgetLedger.load(settings.bootstrap, settings.forget_topic)
    return [r.request_id for r in ledger.requests if r.request_id not in applied]


def log_copies(settings: Settings) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for record in read_bounded(settings.bootstrap, settings.events_topic):
        try:
            event_id = json.loads(record.value or b"").get("event_id")
        except (ValueError, AttributeError, RecursionError):
            continue  # malformed (the fuzz run's): not an acknowledged event
        if isinstance(event_id, str):
            counts[event_id] += 1
    return dict(counts)


def raw_tokens(roots: Iterable[Path], tokens: list[str]) -> set[str]:
    """Tokens found in the raw bytes of any file under ``roots`` (pages, old versions,
    segments: what a person with the disk could read)."""
    needles = [(t, t.encode()) for t in tokens]
    found: set[str] = set()
    for root in roots:
        if not root.exists():
            continue
        for path in root.rglob("*"):
            if not path.is_file() or path.suffix in SKIPPED_SUFFIXES:
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            found |= {t for t, b in needles if t not in found and b in data}
    return found


def clean_rebuild(settings: Settings, into: Path) -> Path:
    """The log rebuilt into ``into`` by the same projector, honouring the forget ledger."""
    rebuild(settings.bootstrap, settings.events_topic, into, batch=500,
            keys=FileKeyStore(settings.keys_dir),
            forgotten=ForgetLedger.load(settings.bootstrap, settings.forget_topic))
    return into


def row_differences(a: Path, b: Path, limit: int = 20) -> list[str]:
    """Where two sets of stores differ, row by row: per table, the whole rows found in only
    one of them (``<``: only in ``a``; ``>``: only in ``b``; memories without their vector),
    so that a verify inequality can be diagnosed."""
    out: list[str] = []
    for table in ("records", "fact_entries", "fact_versions", TABLE):
        rows_a, rows_b = _table_rows(a, table), _table_rows(b, table)
        only_a, only_b = sorted(rows_a - rows_b), sorted(rows_b - rows_a)
        if only_a or only_b:
            out.append(f"{table}: {len(only_a)} row(s) only in {a}, {len(only_b)} only in {b}")
            out += [f"  < {r}" for r in only_a[:limit]] + [f"  > {r}" for r in only_b[:limit]]
    return out


def _table_rows(stores: Path, table: str) -> set[str]:
    return _memory_rows(stores) if table == TABLE else _rows(stores, table)


def _rows(stores: Path, table: str) -> set[str]:
    con = duckdb.connect(str(stores / DUCKDB_FILE), read_only=True)
    try:
        return {repr(row) for row in con.execute(f"SELECT * FROM {table}").fetchall()}
    finally:
        con.close()


def _memory_rows(stores: Path) -> set[str]:
    db = lancedb.connect(stores / LANCE_DIR)
    if TABLE not in db.table_names():
        return set()
    table = db.open_table(TABLE).to_arrow()
    table = table.drop_columns(["vector"]) if "vector" in table.column_names else table
    return {repr(tuple(sorted(r.items()))) for r in table.to_pylist()}


def verify(live: Path, clean: Path) -> Comparison:
    comparison = compare(live, clean)
    if not comparison.equal:
        log.warning("stores differ from a clean rebuild: %s", "; ".join(comparison.lines()))
    return comparison
