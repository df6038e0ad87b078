"""The query benchmark's generators and its oracles (facts, the filtered search), checked."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np

from memstack.jobs.bench.exact import PAD, tokenize
from memstack.jobs.bench.query import (
    BUCKETS,
    MOVES,
    T0,
    V0,
    VOCAB,
    Corpus,
    bench_search,
    expected,
    fact_versions,
)
from memstack.jobs.bench.query_load import build_memories
from memstack.jobs.measure import Report
from memstack.pipelines.stores.bundle import Stores


def _as_of(versions: list, vt: object, tt: object) -> list[str]:  # type: ignore[type-arg]
    return [v.object for v in versions
            if v.vt_from <= vt and (v.vt_to is None or vt < v.vt_to)
            and v.tt_from <= tt and (v.tt_to is None or tt < v.tt_to)]


def test_fact_versions_answer_every_as_of_point_as_the_oracle_says() -> None:
    rng = np.random.default_rng(5)
    for key in (0, 1, 16, 17, 12345):
        versions = fact_versions(range(key, key + 1))
        assert len(versions) == 2 * MOVES - 1
        for _ in range(300):
            vt = V0 + timedelta(days=float(rng.uniform(-10, 30 * MOVES)))
            tt = T0 + timedelta(days=float(rng.uniform(-1, MOVES)))
            want = expected(key, vt, tt)
            assert _as_of(versions, vt, tt) == ([] if want is None else [want])


def test_fact_versions_never_overlap_in_both_times() -> None:
    versions = fact_versions(range(3))
    by_key: dict[str, list] = {}  # type: ignore[type-arg]
    for v in versions:
        by_key.setdefault(v.subject, []).append(v)
    for rows in by_key.values():
        for a in rows:
            for b in rows:
                if a is b:
                    continue
                vt = a.vt_from < (b.vt_to or a.vt_from + timedelta(days=1e5)) and \
                    b.vt_from < (a.vt_to or b.vt_from + timedelta(days=1e5))
                tt = a.tt_from < (b.tt_to or a.tt_from + timedelta(days=1e5)) and \
                    b.tt_from < (a.tt_to or b.tt_from + timedelta(days=1e5))
                assert not (vt and tt), (a, b)


def test_corpus_texts_are_its_tokens_and_carry_their_cluster_topics() -> None:
    corpus = Corpus(500, np.random.default_rng(1))
    vocabulary = {w: i for i, w in enumerate(VOCAB)}
    lengths = (corpus.tokens != PAD).sum(axis=1)
    assert lengths.min() >= 7 and lengths.max() <= 33  # 4-30 common words + 3 topic words
    for row in range(0, 500, 37):
        tokens = [int(t) for t in corpus.tokens[row] if t != PAD]
        assert tokenize(corpus.text(row), vocabulary) == tokens
        assert set(tokens[-3:]) <= set(corpus.topics[corpus.cluster[row]].tolist())
        assert corpus.rows(row, row + 1)[0].text == corpus.text(row)
    assert np.allclose(np.linalg.norm(corpus.vectors, axis=1), 1.0, atol=1e-5)
    same = corpus.vectors[corpus.cluster == corpus.cluster[0]]
    assert float((same @ corpus.vectors[0]).mean()) > 0.3  # a cluster is a neighbourhood


def test_every_row_carries_its_bucket_and_buckets_split_the_corpus() -> None:
    corpus = Corpus(2000, np.random.default_rng(2))
    rows = corpus.rows(0, 2000)
    assert [r.metadata for r in rows[:50]] == [{"bucket": int(b)} for b in corpus.bucket[:50]]
    counts = np.bincount(corpus.bucket, minlength=BUCKETS)
    assert counts.min() >= 1 and counts.max() <= 60  # ~20 per bucket: the filter keeps ~1 %


def test_the_filtered_search_is_timed_checked_and_scored_on_real_stores(tmp_path: Path) -> None:
    """A small corpus through the real stores and the view: every hit of the filtered search
    passes the filter, and with no index built (flat search) fusion equals exact fusion."""
    rng = np.random.default_rng(3)
    corpus = Corpus(3000, rng)
    report = Report("test")
    with Stores.open(tmp_path / "stores") as stores:
        loaded = build_memories(stores, corpus, 3000, report)
        assert stores.vectors.count() == 3000  # bulk and steady parts both written
        assert loaded["search_index_segments"] >= 1 and loaded["steady_ingest_rows_per_s"] > 0
        figures = bench_search(stores, corpus, report, rng, 4)
    assert figures["search_filtered_wrong"] == 0
    assert figures["search_filtered_p50_ms"] > 0
    assert figures["search_filtered_recall@10_vs_exact"] == 1.0
