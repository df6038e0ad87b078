"""``memstack bench query``: as-of ``facts`` and as-of hybrid ``search`` latency at 1M rows.

Rows are generated straight into the stores (bulk, not through Kafka), then queried through
:class:`memstack.view.MemoryView`, so the timings include the view layer (as-of predicate,
tenant check, fusion, row conversion):

- facts: 1M fact versions = 111k keys over 10 tenants, each key moved 5 times in order, which
  the bitemporal timeline turns into 9 versions per key (5 closed in transaction time, 4
  re-cut in valid time). Queries: random tenant, subject, valid and known time; every answer is
  checked against the value worked out from the generator (``facts_wrong`` must be 0).
  After the search part, 9M more versions are written and the same queries run at 10M
  (``facts_*_10m``; ``--quick``: 100k then 1M, ``facts_*_1m``).
- search: 1M memory rows over 10 tenants (96 % loaded in bulk and indexed, the last 4 %
  written as the live writer does, so the indexes have a live table's segments:
  ``search_index_segments``, ``steady_ingest_rows_per_s``; see
  :mod:`~memstack.jobs.bench.query_load`) with SYNTHETIC vectors with cluster structure (1,000
  unit centroids, each row = centroid + isotropic noise of the same norm, renormalised: cosine
  ~0.5 within a cluster, ~0 across, like sentence embeddings of related/unrelated text) and
  synthetic text (see :class:`Corpus`). Queries: a row's vector plus noise and 3 of its topic
  words, at a random as-of point (about half the tenant's rows answer), k=10. The timed call is
  the whole ``search`` with the product's ranking: the query's focus (its term shares sampled
  and cached per scope), encoding by the real model (the configured default encoder; see
  :class:`QueryEncoder`), both legs, fusion, the neighbour rows and the final rows.
  Truth is exact search for both legs over every row of the tenant that answers as of
  (:mod:`memstack.jobs.bench.exact`: brute-force BM25 and exact cosine), fused by the documented
  RRF: ``search_recall@10_vs_exact`` for the top 10 of fusion alone (``ranking=FUSED_ONLY``:
  the indexes' exactness; focus and neighbours reorder by design), ``vector_recall@10_vs_exact`` for
  ``mode="vector"`` against the exact cosine top 10, ``bm25_recall@10_vs_exact`` for
  ``mode="bm25"`` against exact BM25 (a row tied with the exact 10th counts). Each query is
  also run with a selective metadata filter (every row has ``{"bucket": b}``, 100 buckets; the
  filter keeps the query row's bucket, 1 % of rows): ``search_filtered_p50_ms`` /
  ``_p99_ms`` for the whole call, ``search_filtered_recall@10_vs_exact`` for fusion alone
  against exact fusion over the rows that pass, ``search_filtered_wrong`` for hits outside it.

  A filter keeping few rows is resolved first by the view's metadata index (its rows read by
  id and scored exactly, :mod:`memstack.view.selective`); the index is read once before the
  clock starts, like the model is warmed up, and that read is reported apart
  (``search_filter_index_build_s``: a process's first filtered search pays it). So is the
  resident search index that answers searches without a metadata filter
  (:mod:`memstack.view.resident`; ``search_resident_build_s``; ``MEMSTACK_RESIDENT_SEARCH=0``
  measures the search through LanceDB instead).

``--quick``: 100k fact versions and 100k memories (``rows`` says how many). Nothing is cached:
each run generates its data into a temporary directory (1M: ~20 s for the facts, ~25 s to write
the memories and ~90 s to index them on 2 cores; 10M facts: a few more minutes).

``MEMSTACK_BENCH_QUERY_PARTS=search`` runs the search part only (no fact versions, no 10M
pass: about 5 minutes at 1M on 2 cores instead of ~15), with the same corpus, queries and
figures for search; ``facts`` runs the facts part only. Unset (the default): both.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memstack.jobs.bench.exact import PAD, ExactBM25, exact_cosine, recall_with_ties, rrf_top
from memstack.jobs.bench.query_load import build_memories
from memstack.jobs.measure import Report, Result
from memstack.operators.mutations import FactVersion, MemoryRow, PutFactVersion
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.stores.base import Vectors
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.lance_index import LanceVectorIndex
from memstack.view import MemoryView
from memstack.view.fusion import BM25_WEIGHT, RRF_K, VECTOR_WEIGHT
from memstack.view.memory_view import CANDIDATE_FACTOR, MIN_CANDIDATES, AsOfView
from memstack.view.metadata_index import index_of
from memstack.view.resident import resident_of
from memstack.view.search import FUSED_ONLY

TENANTS = 10
MOVES = 5
DIM = 384
CLUSTERS = 1000
BUCKETS = 100
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


def write_facts(stores: Stores, keys: range, report: Report) -> None:
    """The versions of ``keys`` (9 per key), written in bulk, 20k keys per transaction."""
    began = time.monotonic()
    for start in range(keys.start, keys.stop, 20_000):
        batch = fact_versions(range(start, min(keys.stop, start + 20_000)))
        stores.events.apply([PutFactVersion(v) for v in batch], {}, topic="bench")
    report("facts: wrote %d versions (keys %d-%d) in %.1f s", len(keys) * (2 * MOVES - 1),
           keys.start, keys.stop, time.monotonic() - began)


def query_facts(stores: Stores, keys: int, report: Report, rng: np.random.Generator,
                suffix: str = "") -> dict[str, float]:
    """1,000 as-of ``facts`` calls at random keys and times, each checked against the truth."""
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
    report("facts at %d versions: p50 %.2f ms, p99 %.2f ms, %d wrong of %d",
           keys * (2 * MOVES - 1), np.percentile(ms, 50), np.percentile(ms, 99), wrong, len(ms))
    return {f"facts_p50_ms{suffix}": float(np.percentile(ms, 50)),
            f"facts_p99_ms{suffix}": float(np.percentile(ms, 99)),
            f"facts_wrong{suffix}": float(wrong),
            f"fact_versions{suffix}": float(keys * (2 * MOVES - 1))}


class QueryEncoder:
    """Encodes the query with the real model (the configured default encoder), so its time is
    in the timed call, then hands the search the query's synthetic vector: the stored vectors
    are synthetic (1M real encodings would take hours here), and the truth is exact search
    over them."""

    def __init__(self, model: Encoder) -> None:
        self.model = model
        self.vectors: dict[str, Vectors] = {}
        self.current: Vectors | None = None
        """The vector of the query being searched: the ranking's focus may drop a term that
        is common in the tenant, and the text it encodes is then not a key of ``vectors``."""
        self.seconds: list[float] = []
        """How long each encoding took (part of the timed call; reported apart too)."""

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def dim(self) -> int:
        return DIM

    def encode(self, texts: Sequence[str]) -> Vectors:
        began = time.perf_counter()
        self.model.encode(texts)  # paid and timed, as a real query pays it
        self.seconds.append(time.perf_counter() - began)
        return np.stack([self.vectors[t] if t in self.vectors or self.current is None
                         else self.current for t in texts])


def _unit(x: Vectors) -> Vectors:
    out: Vectors = (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)
    return out


class Corpus:
    """Synthetic memories (cluster ids, vectors, times, token ids), all held for exact search.

    Each row's text is 4-30 common words (Zipf over the vocabulary) plus 3 topic words drawn
    with replacement from its cluster's 5: lengths and term counts vary, so BM25 scores
    rarely tie."""

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
        common = rng.zipf(1.3, size=(rows, 30)) % len(VOCAB)
        common[np.arange(30) >= rng.integers(4, 31, size=(rows, 1))] = PAD
        picks = rng.integers(5, size=(rows, 3))
        self.tokens = np.concatenate([common, self.topics[self.cluster[:, None], picks]], axis=1)
        self.bucket = rng.integers(BUCKETS, size=rows)
        """Each row's metadata ``{"bucket": b}``: a filter on one bucket keeps 1 % of rows."""

    def text(self, row: int) -> str:
        return " ".join(VOCAB[t] for t in self.tokens[row] if t != PAD)

    def rows(self, lo: int, hi: int) -> list[MemoryRow]:
        out = []
        for i in range(lo, hi):
            at = V0 + timedelta(days=float(self.days[i]))
            out.append(MemoryRow(f"m{i}", f"m{i}", f"t{self.tenant[i]}", f"s{i % 1000}", None,
                                 "message", self.text(i), at, None, at + timedelta(days=400),
                                 None, i % 3, i, {"bucket": int(self.bucket[i])}))
        return out


@dataclass
class Scores:
    """Per query: the timed call, and recall@10 of each path against exact search."""

    ms: list[float] = field(default_factory=list)
    encode_ms: list[float] = field(default_factory=list)
    fused: list[float] = field(default_factory=list)
    vector: list[float] = field(default_factory=list)
    bm25: list[float] = field(default_factory=list)
    filtered_ms: list[float] = field(default_factory=list)
    filtered: list[float] = field(default_factory=list)
    filtered_wrong: int = 0


def _ids(rows: Iterable[int]) -> list[str]:
    return [f"m{i}" for i in rows]


def bench_search(stores: Stores, corpus: Corpus, report: Report,
                 rng: np.random.Generator, queries: int) -> dict[str, float]:
    from memstack.pipelines.embedding import shared_encoder

    encoder = QueryEncoder(shared_encoder())
    encoder.model.encode(["warm the model up before the clock starts"])
    began = time.perf_counter()
    vectors = stores.vectors
    if isinstance(vectors, LanceVectorIndex):  # the metadata index, read before the clock too
        index_of(vectors).refresh(vectors.lance_table, vectors.uri)
    index_build_s = time.perf_counter() - began
    began = time.perf_counter()
    resident = resident_of(vectors, wait=True)  # the resident index, before the clock too
    resident_build_s = time.perf_counter() - began
    report("resident search index: %s rows, %d vector lists, built in %.1f s",
           "no" if resident is None else resident.rows.live(),
           0 if resident is None else resident.vectors.lists, resident_build_s)
    bm25 = ExactBM25(corpus.tokens, len(VOCAB))
    scores, n = Scores(), max(MIN_CANDIDATES, CANDIDATE_FACTOR * 10)
    for q in range(queries):
        row = int(rng.integers(len(corpus.cluster)))
        tenant, day = int(corpus.tenant[row]), float(rng.uniform(150, 250))
        terms = corpus.topics[corpus.cluster[row]][rng.permutation(5)[:3]]
        text = f"{' '.join(VOCAB[terms])} q{q}"
        encoder.vectors[text] = encoder.current = _unit(
            corpus.vectors[row] + rng.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM) * 0.5)
        view = MemoryView(f"t{tenant}", stores, encoder=encoder).as_of(
            V0 + timedelta(days=day), V0 + timedelta(days=400 + day))
        t = time.perf_counter()
        view.search(text, 10)  # focus, encoding, both legs, fusion, neighbours, rows: all
        scores.ms.append((time.perf_counter() - t) * 1000)
        scores.encode_ms.append(encoder.seconds[-1] * 1000)
        allowed = (corpus.tenant == tenant) & (corpus.days <= day)
        by_text, text_scores = bm25.top(terms.tolist(), allowed, n)
        by_vector = exact_cosine(corpus.vectors, encoder.vectors[text], allowed, n)
        truth = set(rrf_top(_ids(by_text), _ids(by_vector), 10, rrf_k=RRF_K,
                            text_weight=BM25_WEIGHT, vector_weight=VECTOR_WEIGHT))
        # the indexes against exact fusion: the ranking's later stages (focus, neighbours)
        # reorder what fusion found, so the exact reference is fusion alone
        fused = view.search(text, 10, ranking=FUSED_ONLY)
        scores.fused.append(len(truth & {h.memory.memory_id for h in fused})
                            / max(1, len(truth)))
        got = view.search(text, 10, mode="vector")
        scores.vector.append(len({h.memory.memory_id for h in got}
                                 & set(_ids(by_vector[:10]))) / 10)
        got = view.search(text, 10, mode="bm25")
        rows = [int(h.memory.memory_id[1:]) for h in got]
        scores.bm25.append(recall_with_ties(rows, text_scores, bm25.scores(terms.tolist()), 10))
        _filtered(view, text, int(corpus.bucket[row]), allowed, corpus, bm25, terms, encoder,
                  scores, n)
    ms = np.array(scores.ms)
    out = {"search_p50_ms": float(np.percentile(ms, 50)),
           "search_p99_ms": float(np.percentile(ms, 99)),
           "query_encode_p50_ms": float(np.percentile(scores.encode_ms, 50)),
           "search_recall@10_vs_exact": float(np.mean(scores.fused)),
           "vector_recall@10_vs_exact": float(np.mean(scores.vector)),
           "bm25_recall@10_vs_exact": float(np.mean(scores.bm25)),
           "search_queries": float(queries),
           "search_filtered_p50_ms": float(np.percentile(scores.filtered_ms, 50)),
           "search_filtered_p99_ms": float(np.percentile(scores.filtered_ms, 99)),
           "search_filtered_recall@10_vs_exact": float(np.mean(scores.filtered)),
           "search_filtered_wrong": float(scores.filtered_wrong),
           "search_filter_index_build_s": index_build_s,
           "search_resident_build_s": resident_build_s}
    report("search (query encoding included): p50 %.1f ms, p99 %.1f ms (encoding p50 %.1f ms); "
           "recall@10 vs exact: fused %.3f, vector only %.3f, BM25 only %.3f",
           out["search_p50_ms"], out["search_p99_ms"], out["query_encode_p50_ms"],
           out["search_recall@10_vs_exact"],
           out["vector_recall@10_vs_exact"], out["bm25_recall@10_vs_exact"])
    report("search with a metadata filter keeping 1 %% of rows: p50 %.1f ms, p99 %.1f ms; "
           "fused recall@10 vs exact %.3f; %d hits outside the filter (metadata index read "
           "in %.2f s before the clock)",
           out["search_filtered_p50_ms"], out["search_filtered_p99_ms"],
           out["search_filtered_recall@10_vs_exact"], scores.filtered_wrong, index_build_s)
    return out


def _filtered(view: AsOfView, text: str, bucket: int, allowed: npt.NDArray[np.bool_],
              corpus: Corpus, bm25: ExactBM25, terms: npt.NDArray[np.int64],
              encoder: QueryEncoder, scores: Scores, n: int) -> None:
    """The same query with the selective filter ``{"bucket": b}`` (the query row's bucket):
    the whole timed call, and its fusion against exact fusion over the rows that pass it."""
    where = {"bucket": bucket}
    t = time.perf_counter()
    hits = view.search(text, 10, filter=where)
    scores.filtered_ms.append((time.perf_counter() - t) * 1000)
    scores.filtered_wrong += sum(h.memory.metadata != where for h in hits)
    passing = allowed & (corpus.bucket == bucket)
    by_text, _ = bm25.top(terms.tolist(), passing, n)
    by_vector = exact_cosine(corpus.vectors, encoder.vectors[text], passing, n)
    truth = set(rrf_top(_ids(by_text), _ids(by_vector), 10, rrf_k=RRF_K,
                        text_weight=BM25_WEIGHT, vector_weight=VECTOR_WEIGHT))
    fused = view.search(text, 10, ranking=FUSED_ONLY, filter=where)
    scores.filtered.append(len(truth & {h.memory.memory_id for h in fused}) / max(1, len(truth)))


PARTS_ENV = "MEMSTACK_BENCH_QUERY_PARTS"


def parts(value: str | None) -> frozenset[str]:
    """The parts ``MEMSTACK_BENCH_QUERY_PARTS`` names (comma-separated ``facts``, ``search``;
    unset or empty: both)."""
    named = frozenset(p.strip() for p in (value or "").split(",") if p.strip())
    unknown = named - {"facts", "search"}
    if unknown:
        raise ValueError(f"{PARTS_ENV}={value!r}: unknown parts {sorted(unknown)}; use facts, "
                         "search or both, comma-separated")
    return named or frozenset({"facts", "search"})


def run(quick: bool, report: Report) -> Result:
    rows = 100_000 if quick else 1_000_000
    rng = np.random.default_rng(7)
    figures: dict[str, float] = {"rows": float(rows)}
    keys = rows // (2 * MOVES - 1)
    chosen = parts(os.environ.get(PARTS_ENV))
    with tempfile.TemporaryDirectory() as tmp, Stores.open(Path(tmp) / "stores") as stores:
        if "facts" in chosen:
            write_facts(stores, range(keys), report)
            figures.update(query_facts(stores, keys, report, rng))
        else:  # the same random draws for the corpus and the queries as a whole run
            query_facts_draws(rng, keys)
        if "search" in chosen:
            corpus = Corpus(rows, rng)
            figures.update(build_memories(stores, corpus, rows, report))
            figures.update(bench_search(stores, corpus, report, rng, 100 if quick else 200))
            del corpus
        if "facts" in chosen:
            write_facts(stores, range(keys, 10 * keys), report)  # ten times as many versions
            label = "_1m" if quick else "_10m"
            figures.update(query_facts(stores, 10 * keys, report, rng, label))
    return Result("bench query", figures)


def query_facts_draws(rng: np.random.Generator, keys: int) -> None:
    """Draw what :func:`query_facts` draws (1,000 queries over ``keys``), so the search part
    that follows sees the same corpus and queries without the facts part."""
    for _ in range(1000):
        rng.integers(keys)
        rng.uniform(-10, 30 * MOVES)
        rng.uniform(-1, MOVES)
