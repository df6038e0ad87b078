"""The bounded LanceDB purge, on real Lance files: bounded fragments, only the fragments with
deletions rewritten, no byte and no older version left, the full-text remap equal to a clean
build, a purge beside a live writer, and the no-op purge."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import lance
import numpy as np
import pytest

from memstack.jobs.bench.query import Corpus
from memstack.operators.forget import Tombstones
from memstack.operators.mutations import MemoryRow
from memstack.pipelines.forgetting.contract import AuditProbe, files_containing
from memstack.pipelines.forgetting.lance_store import LanceForgetStore
from memstack.pipelines.stores.lance_files import (
    data_files_holding,
    data_files_with,
    index_overcount,
)
from memstack.pipelines.stores.lance_index import TEXT_INDEX, VECTOR_INDEX, IndexPolicy
from tests.forget.givens import request

FRAGMENT = 1_000
POLICY = IndexPolicy(vector_min_rows=1_000_000, fragment_rows=FRAGMENT, refresh_rows=100)


def secret(row: int) -> str:
    """Row ``row``'s secret: letters no corpus text holds (its words are ``w0``..``w4999``),
    random so that no string compression (FSST learns shared substrings) hides them."""
    letters = np.random.default_rng(row).integers(0, 26, size=24)
    return "".join(chr(ord("a") + int(c)) for c in letters)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus(6_000, np.random.default_rng(5))


Rows = frozenset[int] | set[int]


def rows_of(corpus: Corpus, lo: int, hi: int, secrets: Rows = frozenset()) -> list[MemoryRow]:
    """Corpus rows ``lo..hi``; those in ``secret`` also say their :func:`secret`."""
    return [replace(r, text=f"{r.text} {secret(i)}") if i in secrets else r
            for i, r in zip(range(lo, hi), corpus.rows(lo, hi), strict=True)]


def load(directory: Path, corpus: Corpus, rows: int, *, secrets: Rows = frozenset(),
         chunk: int = FRAGMENT, policy: IndexPolicy = POLICY,
         skip: Rows = frozenset()) -> LanceForgetStore:
    """``rows`` corpus rows written ``chunk`` at a time, indexes built (as the benchmark)."""
    store = LanceForgetStore(directory, policy=policy)
    for lo in range(0, rows, chunk):
        hi = min(rows, lo + chunk)
        keep = [i for i in range(lo, hi) if i not in skip]
        batch = rows_of(corpus, lo, hi, secrets)
        store.index.merge([batch[i - lo] for i in keep], corpus.vectors[keep], maintain=False)
    store.index.maintain(force=True)
    return store


def targets(*rows: int) -> Tombstones:
    return Tombstones(request({"type": "tenant"}), frozenset(f"m{i}" for i in rows))


def fragment_files(store: LanceForgetStore) -> dict[int, tuple[str, ...]]:
    dataset = lance.dataset(store.index.uri)
    return {f.fragment_id: tuple(d.path for d in f.data_files()) for f in dataset.get_fragments()}


def secret_files(directory: Path, *rows: int) -> dict[str, int]:
    """Files holding a secret: as raw bytes (any file) or in a data file's decoded text (Lance
    compresses string pages, so raw bytes alone would prove nothing)."""
    files = [str(p) for p in directory.rglob("*") if p.is_file()]
    raw = files_containing(files, [secret(i).encode() for i in rows])
    return raw | data_files_holding(str(directory), "text", [secret(i) for i in rows])


def test_maintenance_keeps_fragments_bounded(tmp_path: Path, corpus: Corpus) -> None:
    store = load(tmp_path / "lance", corpus, 4_900, chunk=700)
    loaded = {f.fragment_id: f.data_files()[0].path for f in
              lance.dataset(store.index.uri).get_fragments()}
    for lo in range(4_900, 5_500, 50):  # the live writer's small batches, maintained
        store.index.merge(corpus.rows(lo, lo + 50), corpus.vectors[lo:lo + 50])
    store.index.maintain(force=True)
    dataset = lance.dataset(store.index.uri)
    sizes = [f.count_rows() for f in dataset.get_fragments()]
    assert max(sizes) <= FRAGMENT and sum(sizes) == 5_500
    # 7 writes of 700, indexed and left as they are; each refresh (every 100 rows) merged the
    # two 50-row writes no index covered yet into one fragment before indexing it, and the
    # tiered merge of the first four 100-row segments merged their fragments too
    assert sorted(sizes) == [100] * 2 + [400] + [700] * 7
    assert {f.fragment_id: f.data_files()[0].path for f in dataset.get_fragments()
            if f.fragment_id in loaded} == loaded
    stats = dataset.stats.index_stats(TEXT_INDEX)
    assert stats["num_unindexed_rows"] == 0  # new rows still reach the indexes


def test_purge_rewrites_only_the_fragments_with_deletions(tmp_path: Path,
                                                          corpus: Corpus) -> None:
    store = load(tmp_path / "lance", corpus, 5_000, secrets={2_345})
    before = fragment_files(store)
    assert store.erase(targets(2_345)) == {"memories": 1}
    figures = store.purge()
    after = fragment_files(store)
    assert figures["fragments_rewritten"] == 1 and figures["rows_rewritten"] == 999
    assert {k: v for k, v in before.items() if k != 2} == {k: v for k, v in after.items()
                                                           if k in before}
    assert 2 not in after and not set(before[2]) & {p for v in after.values() for p in v}
    assert store.index.count() == 4_999 and not store.index.get(["m2345"])


def test_purge_leaves_no_byte_and_no_older_version(tmp_path: Path, corpus: Corpus) -> None:
    directory = tmp_path / "lance"
    store = load(directory, corpus, 3_000, secrets={10, 2_500})
    table = store.index.lance_table
    table.tags.create("before-forget", table.version)
    store.erase(targets(10))
    store.erase(targets(2_500))  # two requests, one purge
    assert secret_files(directory, 10) and secret_files(directory, 2_500)  # the control
    figures = store.purge([secret(10).encode()])
    assert not secret_files(directory, 10, 2_500)
    assert figures["fragments_rewritten"] == 2 and figures["tags_deleted"] == 1
    assert figures["unreferenced_probe_files"] == 0
    dataset = lance.dataset(store.index.uri)
    assert len(dataset.versions()) == 1 and not dataset.tags.list()
    hits = store.index.search_text(secret(10), tenant="t0", k=5)
    assert hits == []


def test_remapped_text_index_equals_a_clean_build(tmp_path: Path, corpus: Corpus) -> None:
    """BM25 depends on the document count, lengths and frequencies of every row: a remap that
    kept the erased rows' would score differently from a build that never saw them. The clean
    build is written the same way (the index's segments depend on it: maintenance adds a
    delta segment per refresh, and scores are not exactly equal across segment layouts)."""
    erased = {7, 1_500, 1_501, 2_999}

    def build(name: str, secrets: Rows, skip: Rows) -> LanceForgetStore:
        store = load(tmp_path / name, corpus, 4_000, secrets=secrets, skip=skip)
        for lo in range(4_000, 4_600, 200):  # delta segments of the text index
            store.index.merge(corpus.rows(lo, lo + 200), corpus.vectors[lo:lo + 200])
        return store

    store = build("lance", erased, frozenset())
    assert store.rebuild_text is False  # the remap alone, the default
    store.erase(targets(*erased))
    store.purge()
    clean = build("clean", frozenset(), erased)
    queries = [corpus.text(i) for i in (7, 1_500, 42, 4_100)] + [f"{secret(7)} w1 w2"]
    for query in queries:
        for tenant in ("t0", "t1"):
            got = {h.row.memory_id: round(h.score, 4)
                   for h in store.index.search_text(query, tenant=tenant, k=50)}
            want = {h.row.memory_id: round(h.score, 4)
                    for h in clean.index.search_text(query, tenant=tenant, k=50)}
            assert got == want, query
    ours = lance.dataset(store.index.uri).stats.index_stats(TEXT_INDEX)["indices"]
    theirs = lance.dataset(clean.index.uri).stats.index_stats(TEXT_INDEX)["indices"]
    assert sum(i["num_docs"] for i in ours) == sum(i["num_docs"] for i in theirs) == 4_596


def test_purge_in_a_thread_beside_the_live_writer(tmp_path: Path, corpus: Corpus) -> None:
    directory = tmp_path / "lance"
    erased = {100, 1_100, 2_100, 3_100}
    store = load(directory, corpus, 4_000, secrets=erased)
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            for lo in range(4_000, 6_000, 50):  # merges with maintenance, as the live worker
                store.index.merge(corpus.rows(lo, lo + 50), corpus.vectors[lo:lo + 50])
        except BaseException as exc:
            failures.append(exc)

    def purger() -> None:
        try:
            for row in sorted(erased):
                store.erase(targets(row))
                store.purge()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=purger)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    store.purge()
    present = set(store.index.scan(columns=["memory_id"]).column("memory_id").to_pylist())
    assert {f"m{i}" for i in range(4_000, 6_000)} <= present
    assert not {f"m{i}" for i in erased} & present and len(present) == 6_000 - len(erased)
    assert not secret_files(directory, *erased)


def test_purge_with_nothing_deleted_is_a_cheap_no_op(tmp_path: Path, corpus: Corpus) -> None:
    store = load(tmp_path / "lance", corpus, 2_000)
    store.purge()  # drops the build's older versions
    version, files = store.index.version, fragment_files(store)
    figures = store.purge()
    assert figures["fragments_rewritten"] == 0 and figures["s"] < 0.5
    assert lance.dataset(store.index.uri).version == version and fragment_files(store) == files


def test_vector_index_is_remapped_not_retrained_until_asked(tmp_path: Path,
                                                            corpus: Corpus) -> None:
    policy = replace(POLICY, vector_min_rows=2_000)
    store = load(tmp_path / "lance", corpus, 3_000, policy=policy)
    trained = store.index.vector_index_trained_version()
    assert trained is not None
    store.erase(targets(5))
    store.purge()
    assert store.index.vector_index_trained_version() == trained  # codebooks saw row 5
    names = {i["name"] for i in lance.dataset(store.index.uri).list_indices()}
    assert VECTOR_INDEX in names
    hits = store.index.search_vector(corpus.vectors[5], tenant="t5", k=3)
    assert hits and all(h.row.memory_id != "m5" for h in hits)
    retrained = store.index.retrain_vector_index()
    assert retrained > trained and store.index.vector_index_trained_version() == retrained


def test_a_whole_fragment_deleted_rebuilds_the_text_index(tmp_path: Path,
                                                          corpus: Corpus) -> None:
    """A delete that takes every row of a fragment drops the fragment at once: no deletion
    file, nothing for a compaction to rewrite or remap. The text index still holds those
    documents; the purge sees it (more documents than live rows) and rebuilds it."""
    directory = tmp_path / "lance"
    store = load(directory, corpus, 3_000, secrets={1_500})
    store.erase(targets(*range(1_000, 2_000)))
    assert index_overcount(lance.dataset(store.index.uri), TEXT_INDEX) == 1_000  # the control
    figures = store.purge([secret(1_500).encode()])
    assert figures["text_rebuilt"] == 1.0 and figures["vector_retrained"] == 0.0
    assert index_overcount(lance.dataset(store.index.uri), TEXT_INDEX) == 0
    assert not secret_files(directory, 1_500)
    for tenant in ("t0", "t1"):
        assert store.index.search_text(secret(1_500), tenant=tenant, k=5) == []


def test_a_purge_that_remaps_does_not_rebuild(tmp_path: Path, corpus: Corpus) -> None:
    store = load(tmp_path / "lance", corpus, 3_000, secrets={10})
    store.erase(targets(10))
    figures = store.purge()
    assert figures["fragments_rewritten"] == 1 and figures["text_rebuilt"] == 0.0
    assert index_overcount(lance.dataset(store.index.uri), TEXT_INDEX) == 0
    assert not secret_files(tmp_path / "lance", 10)


def test_old_versions_are_opened_only_while_a_data_file_holds_the_rows(
        tmp_path: Path, corpus: Corpus) -> None:
    """The audit's old-version check: while a data file holds a forgotten id (erased, not yet
    purged) every older version is opened and the row is found there; once purged, and with
    versions added by ingest since, no data file holds it and no version needs opening."""
    directory = tmp_path / "lance"
    store = load(directory, corpus, 3_000)
    table = store.index.lance_table
    store.erase(targets(10))
    assert data_files_with(str(directory), "event_id", ["m10"])  # the control
    probe = AuditProbe(request({"type": "tenant"}), frozenset({"m10"}))
    found = [r for r in store.residuals(probe) if r.check == "old_versions"]
    assert found and found[0].count >= 1
    store.purge()
    for lo in range(3_000, 3_200, 50):  # ingest: a version each
        store.index.merge(corpus.rows(lo, lo + 50), corpus.vectors[lo:lo + 50])
    assert len(table.list_versions()) > 1
    assert not data_files_with(str(directory), "event_id", ["m10"])
    assert not [r for r in store.residuals(probe) if r.check == "old_versions"]
