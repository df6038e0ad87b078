"""Store and projector throughput (not collected by pytest; run by hand).

    .venv/bin/python -m tests.pipelines.bench_stores [--texts 2000] [--batches 20]

Prints DuckDB apply rows/s and Lance merge rows/s at batch 1000, and the projector's
throughput against bare embedding of the same texts (same model, same batch size).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import Mutation, PutMemory
from memstack.pipelines.embedding import shared_encoder
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.bundle import Stores
from memstack.pipelines.stores.duckdb_index import DuckDBEventIndex
from memstack.pipelines.stores.lance_index import LanceVectorIndex
from tests.pipelines.helpers import TOPIC, at, builder, logged, memories, record, unit_vectors

BATCH = 1000


def batches(n: int) -> list[list[Mutation]]:
    b, op = builder(), MemoryOperator()
    out = []
    for i in range(n):
        events = []
        for j in range(BATCH):
            tt = i * BATCH + j
            if j % 10 == 0:
                ev = b.fact(f"s{tt % 50}", f"user{tt % 200}", "lives_in", f"city{tt}",
                            occurred_at=at(tt))
            else:
                ev = b.message(f"s{tt % 50}", "user", f"short message {tt}", occurred_at=at(tt))
            events.append(logged(ev, tt))
        out.append(op.apply_batch(events))
    return out


def bench_duckdb(work: Path, n: int) -> None:
    data = batches(n)
    index = DuckDBEventIndex(work / "bench.duckdb")
    rows = sum(1 for muts in data for m in muts if not isinstance(m, PutMemory))
    began = time.perf_counter()
    for i, muts in enumerate(data):
        index.apply(muts, {0: (i + 1) * BATCH}, topic=TOPIC)
    took = time.perf_counter() - began
    print(f"duckdb apply: {rows} rows in {n} batches of {BATCH} events: "
          f"{rows / took:,.0f} rows/s ({took / n * 1000:.1f} ms/batch)")
    index.close()


def bench_lance(work: Path, n: int) -> None:
    rows = memories([m for muts in batches(n) for m in muts])
    vecs = unit_vectors(len(rows))
    index = LanceVectorIndex(work / "lance")
    began = time.perf_counter()
    for i in range(0, len(rows), BATCH):
        index.merge(rows[i:i + BATCH], vecs[i:i + BATCH], maintain=False)
    took = time.perf_counter() - began
    print(f"lance merge (no maintenance): {len(rows)} rows: {len(rows) / took:,.0f} rows/s")
    began = time.perf_counter()
    index.merge(rows, vecs)  # all present: the idempotent re-merge, then indexes built
    print(f"lance re-merge of {len(rows)} rows + first maintenance: "
          f"{time.perf_counter() - began:.2f} s, {index.maintain()}")


def bench_projector(work: Path, texts: int, batch: int) -> None:
    """Bare embedding vs the projector on the same texts, interleaved per batch.

    Interleaving (bare batch i, then projector batch i) exposes both to the same machine load;
    CPU time (all threads of this process) is reported next to wall time, as it is steadier
    on a shared machine.
    """
    b = builder()
    phrases = [f"I think item {i} is quite nice today" for i in range(texts)]
    log = [record(b.message(f"s{i % 20}", "user", phrases[i], occurred_at=at(i)), i)
           for i in range(texts)]
    encoder = shared_encoder().load()
    encoder.encode(["warm up"])
    bare = [0.0, 0.0]
    full = [0.0, 0.0]
    with Stores.open(work / "proj") as stores:
        projector = StoreProjector(stores, encoder, TOPIC)
        for i in range(0, texts, batch):
            wall, cpu = time.perf_counter(), time.process_time()
            encoder.encode(phrases[i:i + batch])
            bare[0] += time.perf_counter() - wall
            bare[1] += time.process_time() - cpu
            wall, cpu = time.perf_counter(), time.process_time()
            projector.commit(projector.prepare(log[i:i + batch]))
            full[0] += time.perf_counter() - wall
            full[1] += time.process_time() - cpu
    print(f"embedding only: {texts / bare[0]:.1f} texts/s wall; projector: "
          f"{texts / full[0]:.1f} events/s wall; ratio wall {bare[0] / full[0]:.3f}, "
          f"ratio cpu {bare[1] / full[1]:.3f} (batch {batch}, {texts} texts)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        bench_duckdb(work, args.batches)
        bench_lance(work, args.batches)
        bench_projector(work, args.texts, args.batch)


if __name__ == "__main__":
    main()
