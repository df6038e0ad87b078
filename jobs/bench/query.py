"""``memstack bench query``: as-of ``facts`` and as-of hybrid ``search`` latency at 1M rows.

Rows are generated straight into the stores (bulk, not through Kafka), then queried through
:class:`memstack.view.MemoryView`, so the timings include the view layer (as-of predicate,
tenant check, fusion, row conversion):

- facts: 1M fact versions = 111k keys over 10 tenants, each key moved 5 times in order, which
  the bitemporal timeline turns into 9 versions per key (5 closed in transaction time, 4
  re-cut in valid time). Queries: random tenant, subject, valid and known time; every answer is
  checked against the value worked out from the generator (``facts_wrong`` must be 0).
- search: 1M memory rows over 10 tenants with SYNTHETIC vectors with cluster structure (1,000
  unit centroids, each row = centroid + isotropic noise of the same norm, renormalised: cosine
  ~0.5 within a cluster, ~0 across, like sentence embeddings of related/unrelated text) and
  synthetic text (Zipf-distributed vocabulary plus 5 topic words per cluster). Queries: a row's
  vector plus noise and 3 of its topic words, at a random as-of point (about half the tenant's
  rows answer), k=10. ``search_recall@10_vs_exact``: overlap of the fused top 10 with the top 10
  fused from the same BM25 candidates (the view's own BM25 leg) and EXACT (brute-force, same
  prefilter) vector candidates.

``--quick``: 100k fact versions and 100k memories (``rows`` says how many). Nothing is cached:
each run generates its data into a temporary directory (1M: ~20 s for the facts, ~25 s to write
the memories and ~90 s to index them on 2 cores; the whole run takes 5-7 minutes).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa

from memstack.jobs.measure import Report, Result
from memstack.operators.mutations import FactVersion, MemoryRow, PutFactVersion
from memstack.pipelines.stores.base import Vectors
from memstack.pipelines.stores.bundle import Stores
from memstack.view import MemoryView
from memstack.view.fusion import Candidate, fuse
from memstack.view.memory_view import CANDIDATE_FACTOR, MIN_CANDIDATES

TENANTS = 10
MOVES = 5
DIM = 384
CLUSTERS = 1000
T0 = datetime(2025, 1, 1, tzinfo=UTC)
V0 = datetime(2024, 1, 1, tzinfo=UTC)
VOCAB = np.array([f"w{i}" for i in range(5000)])


def _vt(key: int, i: int) -> datetime:
    return V0 + timedelta(days=30 * i + key % 17)


def _tt(key: int, i: int) -> datetime:
    return T0 + timedelta(days=i, milliseconds=key)


def _version(key: int, i: int, end: int | None, closed: int | None, n: int) -> FactVersion:
    tt_to = None if closed is None else _tt(key, closed)
    return FactVersion(
        f"v{key}-{i}-{n}", f"t{key % TENANTS}", f"s{key}", "lives_in", f"city{(key + i) % 97}",
        _vt(key, i), None if end is None else _vt(key, end), _tt(key, n), 0, key * MOVES + n,
        tt_to, None if closed is None else 0, None if closed is None else key * MOVES + closed,
        f"e{key}-{i}", None if closed is None else f"e{key}-{closed}")


def fact_versions(keys: range) -> list[FactVersion]:
    """The versions the timeline derives for in-order moves (9 per key for 5 moves)."""
    out: list[FactVersion] = []
    for key in keys:
        for i in range(MOVES):
            last = i == MOVES - 1
            out.append(_version(key, i, None, None if last else i + 1, i))
            if not last:
                out.append(_version(key, i, i + 1, None, i + 1))
    return out


def expected(key: int, vt: datetime, tt: datetime) -> str | None:
    known = [i for i in range(MOVES) if _tt(key, i) <= tt and _vt(key, i) <= vt]
    return None if not known else f"city{(key + max(known)) % 97}"


def bench_facts(stores: Stores, rows: int, report: Report, rng: np.random.Generator) -> dict[
        str, float]:
    keys = rows // (2 * MOVES - 1)
    began = time.monotonic()
    for start in range(0, keys, 20_000):
        batch = fact_versions(range(start, min(keys, start + 20_000)))
        stores.events.apply([PutFactVersion(v) for v in batch], {}, topic="bench")
    report("facts: wrote %d versions (%d keys) in %.1f s", keys * (2 * MOVES - 1), keys,
           time.monotonic() - began)
    times, wrong = [], 0
    for _ in range(1000):
        key = int(rng.integers(keys))
        vt = V0 + timedelta(days=float(rng.uniform(-10, 30 * MOVES)))
        tt = T0 + timedelta(days=float(rng.uniform(-1, MOVES)))
        view = MemoryView(f"t{key % TENANTS}", stores)
        t = time.perf_counter()
        got = view.as_of(vt, tt).facts(f"s{key}", "lives_in")
        times.append(time.perf_counter() - t)
        want = expected(key, vt, tt)
        wrong += [f.object for f in got] != ([] if want is None else [want])
    ms = np.array(times) * 1000
    report("facts: p50 %.2f ms, p99 %.2f ms, %d wrong of %d", np.percentile(ms, 50),
           np.percentile(ms, 99), wrong, len(ms))
    return {"facts_p50_ms": float(np.percentile(ms, 50)),
            "facts_p99_ms": float(np.percentile(ms, 99)), "facts_wrong": float(wrong),
            "fact_versions": float(keys * (2 * MOVES - 1))}


class PreparedEncoder:
    """Query vectors given in advance (the benchmark's vectors are synthetic, not MiniLM)."""

    name = "prepared"
    dim = DIM

    def __init__(self) -> None:
        self.vectors: dict[str, Vectors] = {}

    def encode(self, texts: Sequence[str]) -> Vectors:
        return np.stack([self.vectors[t] for t in texts])


def _unit(x: Vectors) -> Vectors:
    out: Vectors = (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)
    return out


class Corpus:
    """Synthetic memories: cluster ids, vectors, times and texts, all held for exact search."""

    def __init__(self, rows: int, rng: np.random.Generator) -> None:
        self.centroids = _unit(rng.standard_normal((CLUSTERS, DIM)).astype(np.float32))
        self.cluster = rng.integers(CLUSTERS, size=rows)
        self.tenant = np.arange(rows) % TENANTS
        self.days = rng.uniform(0, 365, size=rows)
        self.vectors = np.empty((rows, DIM), dtype=np.float32)
        for s in range(0, rows, 100_000):
            c = self.cluster[s:s + 100_000]
            noise = rng.standard_normal((len(c), DIM)).astype(np.float32) / np.sqrt(DIM)
            self.vectors[s:s + 100_000] = _unit(self.centroids[c] + noise)
        self.topics = rng.integers(len(VOCAB), size=(CLUSTERS, 5))

    def texts(self, lo: int, hi: int, rng: np.random.Generator) -> list[str]:
        common = rng.zipf(1.3, size=(hi - lo, 10)) % len(VOCAB)
        topic = self.topics[self.cluster[lo:hi]][:, :2]
        return [" ".join(VOCAB[np.concatenate([a, b])]) for a, b in zip(common, topic,
                                                                         strict=True)]

    def rows(self, lo: int, hi: int, rng: np.random.Generator) -> list[MemoryRow]:
        out = []
        for i, text in zip(range(lo, hi), self.texts(lo, hi, rng), strict=True):
            at = V0 + timedelta(days=float(self.days[i]))
            out.append(MemoryRow(f"m{i}", f"m{i}", f"t{self.tenant[i]}", f"s{i % 1000}", None,
                                 "message", text, at, None, at + timedelta(days=400), None,
                                 i % 3, i))
        return out


def build_memories(stores: Stores, corpus: Corpus, rows: int, report: Report,
                   rng: np.random.Generator) -> None:
    began = time.monotonic()
    for lo in range(0, rows, 50_000):
        hi = min(rows, lo + 50_000)
        stores.vectors.merge(corpus.rows(lo, hi, rng), corpus.vectors[lo:hi], maintain=False)
    report("search: wrote %d memories in %.1f s", rows, time.monotonic() - began)
    began = time.monotonic()
    done = stores.vectors.maintain(force=True)
    report("search: built indexes %s in %.1f s", list(done.built), time.monotonic() - began)


def _exact(corpus: Corpus, tenant: int, day: float, vector: Vectors, n: int) -> list[str]:
    mask = (corpus.tenant == tenant) & (corpus.days <= day)
    idx = np.flatnonzero(mask)
    sims = corpus.vectors[idx] @ vector
    top = idx[np.argsort(-sims, kind="stable")[:n]]
    return [f"m{i}" for i in top]


def _bm25(stores: Stores, text: str, tenant: str, k: int, where: str | None) -> pa.Table:
    return stores.vectors.text_candidates(text, tenant=tenant, k=k, where=where)


def bench_search(stores: Stores, corpus: Corpus, report: Report,
                 rng: np.random.Generator, queries: int) -> dict[str, float]:
    encoder = PreparedEncoder()
    times, overlap, vector_overlap = [], [], []
    n = max(MIN_CANDIDATES, CANDIDATE_FACTOR * 10)
    for q in range(queries):
        row = int(rng.integers(len(corpus.cluster)))
        tenant, day = int(corpus.tenant[row]), float(rng.uniform(150, 250))
        words = VOCAB[corpus.topics[corpus.cluster[row]][rng.permutation(5)[:3]]]
        text = f"{' '.join(words)} q{q}"
        vector = _unit(corpus.vectors[row] + rng.standard_normal(DIM).astype(np.float32)
                       / np.sqrt(DIM) * 0.5)
        encoder.vectors[text] = vector
        view = MemoryView(f"t{tenant}", stores, encoder=encoder).as_of(
            V0 + timedelta(days=day), V0 + timedelta(days=400 + day))
        t = time.perf_counter()
        hits = view.search(text, 10)
        times.append(time.perf_counter() - t)
        where = view._scope(None, None, None)
        # the BM25 leg exactly as the view runs it (as-of postfilter): BM25 ties (equal scores)
        # are common in this corpus and LanceDB breaks them differently under a prefilter
        by_text = view._candidates(view._leg(partial(_bm25, stores, text, f"t{tenant}"), n, []))
        exact_ids = _exact(corpus, tenant, day, vector, n)
        by_vector = [Candidate(i, 0.0) for i in exact_ids]
        truth = {f.memory_id for f in fuse(by_text, by_vector, 10)}
        overlap.append(len(truth & {h.memory.memory_id for h in hits}) / max(1, len(truth)))
        ann = stores.vectors.search_vector(vector, tenant=f"t{tenant}", k=10, where=where)
        vector_overlap.append(len({h.row.memory_id for h in ann} & set(exact_ids[:10])) / 10)
    ms = np.array(times) * 1000
    report("search: p50 %.1f ms, p99 %.1f ms, recall@10 vs exact %.3f (vector only %.3f)",
           np.percentile(ms, 50), np.percentile(ms, 99), np.mean(overlap),
           np.mean(vector_overlap))
    return {"search_p50_ms": float(np.percentile(ms, 50)),
            "search_p99_ms": float(np.percentile(ms, 99)),
            "search_recall@10_vs_exact": float(np.mean(overlap)),
            "vector_recall@10_vs_exact": float(np.mean(vector_overlap)),
            "search_queries": float(queries)}


def run(quick: bool, report: Report) -> Result:
    rows = 100_000 if quick else 1_000_000
    rng = np.random.default_rng(7)
    figures: dict[str, float] = {"rows": float(rows)}
    with tempfile.TemporaryDirectory() as tmp, Stores.open(Path(tmp) / "stores") as stores:
        figures.update(bench_facts(stores, rows, report, rng))
        corpus = Corpus(rows, rng)
        build_memories(stores, corpus, rows, report, rng)
        figures.update(bench_search(stores, corpus, report, rng, 100 if quick else 200))
    return Result("bench query", figures)
