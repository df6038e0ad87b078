"""Physical erasure, measured: what a logical delete leaves behind, and that the purge doesn't,
touching only what holds the forgotten rows (no copy of the DuckDB file, only the Lance files
with deleted rows rewritten)."""

from __future__ import annotations

from pathlib import Path

import lance

from memstack.operators.forget import resolve_events
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.forgetting.contract import AuditProbe, files_containing
from memstack.pipelines.forgetting.duckdb_store import DuckDBForgetStore, connection
from memstack.pipelines.forgetting.lance_store import table_of
from memstack.pipelines.stores.duckdb_shred import NO_COMPRESSION
from memstack.pipelines.stores.lance_index import IndexPolicy
from tests.forget.givens import event_request, memory, request
from tests.forget.stores import DuckDBUnderTest, LanceUnderTest

SECRET = b"allergic to penicillin"


def _plain_duckdb(path: Path, *, compact: bool = False) -> DuckDBUnderTest:
    """A DuckDB store whose strings are stored uncompressed, so a byte search can see them;
    in-place erasure only unless ``compact``."""
    sut = DuckDBUnderTest(path, compact=compact)
    connection(sut.store.index).execute(f"SET disabled_compression_methods = '{NO_COMPRESSION}'")
    return sut


def test_duckdb_delete_leaves_the_bytes_blank_and_shred_remove_them_in_place(
        tmp_path: Path) -> None:
    events = memory()
    plain = _plain_duckdb(tmp_path / "plain.duckdb")
    plain.load(events)
    con = connection(plain.store.index)
    con.execute("CHECKPOINT")
    assert files_containing([str(plain.store.path)], [SECRET])  # the search sees stored text
    con.execute("DELETE FROM records WHERE event_id = ?", [events[1].event.event_id])
    con.execute("CHECKPOINT")
    assert files_containing([str(plain.store.path)], [SECRET]), "DELETE + CHECKPOINT keeps it"
    path = tmp_path / "memstack.duckdb"
    sut = _plain_duckdb(path)
    sut.load(events)
    connection(sut.store.index).execute("CHECKPOINT")
    inode, records = path.stat().st_ino, sut.store.index.counts()["records"]
    targets = resolve_events(event_request(events[1]), events)
    report = sut.store.forget(targets)
    assert report.physical["shredded_blocks"] >= 1
    assert sut.store.residuals(AuditProbe.of(targets)) == []
    assert not files_containing([str(path)], [SECRET])
    assert path.stat().st_ino == inode, "erased in place: the file was not copied"
    kept = b"sailing regatta in Cascais"
    assert files_containing([str(path)], [kept])
    assert sut.store.index.counts()["records"] == records - 1


def test_duckdb_offline_purge_also_rewrites_the_file_whole(tmp_path: Path) -> None:
    """With the stores not in use (its own index), the purge ends with a full rewrite: stale
    copies in shared blocks (the limit of in-place erasure) cannot survive it."""
    events = memory()
    path = tmp_path / "memstack.duckdb"
    sut = _plain_duckdb(path, compact=True)
    sut.load(events)
    connection(sut.store.index).execute("CHECKPOINT")
    inode = path.stat().st_ino
    targets = resolve_events(event_request(events[1]), events)
    report = sut.store.forget(targets)
    assert report.physical["compacted"] == 1.0 and path.stat().st_ino != inode
    assert sut.store.residuals(AuditProbe.of(targets)) == []
    assert DuckDBForgetStore(path, index=sut.store.index)._compact is False  # never live


def test_duckdb_hide_commits_at_once_and_keeps_everything_else(tmp_path: Path) -> None:
    events = memory()
    sut = _plain_duckdb(tmp_path / "memstack.duckdb")
    sut.load(events)
    targets = resolve_events(request({"type": "session", "session": "s1"}), events)
    before = sut.visible_ids("acme")
    report = sut.store.hide(targets)
    assert report.deleted["records"] == 2
    assert sut.visible_ids("acme") == before - targets.event_ids
    assert sut.visible_ids("other") == {events[8].event.event_id}


def test_lance_purge_rewrites_only_the_files_holding_deleted_rows(
    tmp_path: Path, minilm: MiniLMEncoder
) -> None:
    events = memory()
    policy = IndexPolicy(vector_min_rows=1_000_000, fragment_rows=2)
    sut = LanceUnderTest(tmp_path / "lance", minilm, policy)
    sut.load(events)
    sut.store.index.maintain(force=True)
    uri = str(tmp_path / "lance" / "memories.lance")
    files = {f.fragment_id: f.data_files()[0].path for f in lance.dataset(uri).get_fragments()}
    assert len(files) >= 3  # written in files of at most two rows
    table = table_of(sut.store.index)
    table.tags.create("before-forget", table.version)
    targets = resolve_events(event_request(events[1]), events)
    probe, visible = AuditProbe.of(targets), sut.visible_ids("acme")
    assert sut.store.hide(targets).deleted["memories"] == 1
    assert {r.check for r in sut.store.residuals(probe)} == {"old_versions", "file_bytes"}
    physical = sut.store.purge()
    assert physical["fragments_rewritten"] == 1.0 and physical["rows_deleted"] == 1.0
    assert physical["tags_deleted"] == 1.0 and physical["versions_left"] == 1.0
    after = {f.fragment_id: f.data_files()[0].path for f in lance.dataset(uri).get_fragments()}
    assert len(set(files.items()) - set(after.items())) == 1, "one file rewritten, no other"
    assert sut.store.residuals(probe) == []
    on_disk = [str(p) for p in (tmp_path / "lance").rglob("*") if p.is_file()]
    assert not files_containing(on_disk, [SECRET])
    hits = sut.store.index.search_text("penicillin epipen", tenant="acme", k=5)
    assert all(h.row.event_id not in targets.event_ids for h in hits)
    assert {i.name for i in table.list_indices()} >= {"text_idx"}
    assert sut.visible_ids("acme") == visible - targets.event_ids and len(visible) == 5
