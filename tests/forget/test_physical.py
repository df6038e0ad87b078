"""Physical erasure, measured: what a logical delete leaves behind, and that the purge doesn't."""

from __future__ import annotations

from pathlib import Path

from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.forgetting.contract import AuditProbe, files_containing
from tests.forget.givens import event_request, memory
from tests.forget.reference import resolve_events
from tests.forget.stores import DuckDBUnderTest, LanceUnderTest

SECRET = b"allergic to penicillin"


def test_duckdb_purge_removes_the_bytes_without_closing(tmp_path: Path) -> None:
    """The control (``DELETE`` + ``CHECKPOINT`` alone leaves them) is in test_duckdb_purge.py."""
    events = memory()
    sut = DuckDBUnderTest(tmp_path / "memstack.duckdb")
    sut.load(events)
    index = sut.store.index
    targets = resolve_events(event_request(events[1]), events)
    report = sut.store.forget(targets)
    assert report.deleted["records"] == 1 and report.physical["clean"] == 1.0
    assert sut.store.residuals(AuditProbe.of(targets)) == []
    assert not files_containing([str(sut.store.path)], [SECRET])
    assert sut.store.index is index  # the purge did not close and reopen the index


def test_lance_delete_leaves_old_versions_and_bytes_the_purge_removes_them(
    tmp_path: Path, minilm: MiniLMEncoder
) -> None:
    events = memory()
    sut = LanceUnderTest(tmp_path / "lance", minilm)
    sut.load(events)
    table = sut.store.index.lance_table
    table.tags.create("before-forget", table.version)
    targets = resolve_events(event_request(events[1]), events)
    probe = AuditProbe.of(targets)
    assert sut.store.erase(targets) == {"memories": 1}
    checks = {r.check for r in sut.store.residuals(probe)}
    assert checks == {"old_versions", "file_bytes"}
    physical = sut.store.purge()
    assert physical["tags_deleted"] == 1.0 and physical["versions_left"] == 1.0
    assert sut.store.residuals(probe) == []
    files = [str(p) for p in (tmp_path / "lance").rglob("*") if p.is_file()]
    assert not files_containing(files, [SECRET])
    hits = sut.store.index.search_text("penicillin epipen", tenant="acme", k=5)
    assert all(h.row.event_id not in targets.event_ids for h in hits)
    assert {i.name for i in table.list_indices()} >= {"text_idx"}
