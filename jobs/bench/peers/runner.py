"""One run of the peers bench: both systems ingest the same turns, then answer the same
questions, taking turns question by question, and are scored by the same oracle."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from memstack.foundation.settings import Settings
from memstack.jobs.bench.broker_env import scratch_deployment
from memstack.jobs.bench.peers import mem0_side, memstack_side
from memstack.jobs.bench.peers.figures import OURS, goal_lines, order, summarise
from memstack.jobs.bench.peers.sides import Side
from memstack.jobs.eval.locomo import Retrieved
from memstack.jobs.eval.locomo_data import Conversation, Question
from memstack.jobs.measure import Report, Result
from memstack.pipelines.embedding import encoder_kind


@dataclass
class PeersResult(Result):
    """A result with ``notes``: how each system was run, which Mem0 configuration gave each
    of its headline figures, and the goals."""

    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        body = json.loads(super().to_json())
        body["notes"] = self.notes
        return json.dumps(body, allow_nan=False)


def search_all(convs: Sequence[Conversation], sides: Sequence[Side],
               report: Report) -> tuple[Retrieved, dict[str, list[float]]]:
    """Every question with evidence asked of every side (the order rotating per question):
    each side's hits, and each side's seconds per search."""
    got: Retrieved = {}
    seconds: dict[str, list[float]] = {s.name: [] for s in sides}
    by_name = {s.name: s for s in sides}
    index = 0
    for conv in convs:
        for q in (q for q in conv.questions if q.evidence):
            for name in order(list(by_name), index):
                began = time.perf_counter()
                hits = by_name[name].searcher.search(q.question, conv.sample_id)
                seconds[name].append(time.perf_counter() - began)
                got[(q.qid, name)] = hits
            index += 1
        report("searched %d questions (%s done); mean ms so far: %s", index, conv.sample_id,
               ", ".join(f"{n} {1000 * sum(v) / len(v):.0f}" for n, v in seconds.items() if v))
    return got, seconds


def notes(versions: dict[str, str], chosen: dict[str, str], keyword: dict[str, bool],
          figures: dict[str, float]) -> list[str]:
    mem0 = ", ".join(f"{k} {v}" for k, v in versions.items())
    return [
        f"memstack: turns emitted through Kafka (MemoryClient, sealed) and rebuilt into DuckDB "
        f"and LanceDB, the path of eval locomo; encoder {encoder_kind()}; search "
        "MemoryView.search(k=10, kinds=[message], session=conversation) with the product's "
        "default ranking. Ingest clock: topics, clients, encoder load, emit, rebuild, stores "
        "open; the broker is started before it.",
        f"mem0 ({mem0}): add(infer=False) per LoCoMo session, search(top_k=10, "
        "filters={run_id}, threshold=0.0); local Qdrant on disk; keyword leg: fastembed Bm25 "
        "built from a local folder with scikit-learn's English stopwords (the Qdrant/bm25 "
        "stopword files are a model-hub download); no spaCy model (a download): no lemmas, "
        "no entity boosts; no LLM. Ingest clock: Memory(config), model load included, and "
        "every add.",
        "mem0 embedders, same all-MiniLM-L6-v2 weights: mem0_st = its huggingface provider "
        "(sentence-transformers, torch fp32, 1 torch thread: faster than 2 on a shared "
        "machine) on the packaged model folder; mem0_onnx = a Mem0 embedder calling "
        "memstack's onnx-int8 encoder. mem0_* = the best of them per figure: "
        + ", ".join(f"{k} from {v}" for k, v in sorted(chosen.items())) + ".",
        "mem0 keyword leg answering: " + ", ".join(
            f"{k} {'yes' if v else 'NO'}" for k, v in keyword.items()) + ".",
        "goals: " + "; ".join(goal_lines(figures)) + ".",
    ]


def compare(convs: Sequence[Conversation], report: Report,
            embedders: Sequence[str] = mem0_side.EMBEDDERS) -> PeersResult:
    """The bench on ``convs``: memstack, then Mem0 with each of ``embedders``."""
    versions = mem0_side.versions()  # fails at once, before a broker starts, without Mem0
    questions: list[Question] = [q for c in convs for q in c.questions if q.evidence]
    report("LoCoMo: %d conversations, %d turns, %d questions with evidence; load %.1f",
           len(convs), sum(len(c.turns) for c in convs), len(questions), os.getloadavg()[0])
    keyword: dict[str, bool] = {}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="memstack-peers-")))
        mem0_side.prepare_environment(workdir)
        stack.enter_context(scratch_deployment(Settings.from_env()))  # the broker, unclocked
        sides: list[Side] = [stack.enter_context(memstack_side.ingest(convs, report))]
        for embedder in embedders:
            side, answers = stack.enter_context(mem0_side.ingest(convs, embedder, workdir,
                                                                 report))
            keyword[side.name] = answers
            sides.append(side)
        got, seconds = search_all(convs, sides, report)
    figures, chosen = summarise(sides, questions, got, seconds)
    figures["conversations"] = float(len(convs))
    figures["mem0_keyword_leg"] = float(all(keyword.values()))
    lines = notes(versions, chosen, keyword, figures)
    for line in lines:
        report("%s", line)
    report("recall@10 memstack %.3f vs mem0 %.3f; ingest %.1f vs %.1f turns/s; search p50 %.1f "
           "vs %.1f ms; load %.1f", figures[f"{OURS}_recall@10"], figures["mem0_recall@10"],
           figures[f"{OURS}_ingest_turns_per_s"], figures["mem0_ingest_turns_per_s"],
           figures[f"{OURS}_search_p50_ms"], figures["mem0_search_p50_ms"], os.getloadavg()[0])
    return PeersResult("bench peers", figures, ratio=figures["ingest_ratio"], notes=lines)
