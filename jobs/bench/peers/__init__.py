"""``memstack bench peers``: memstack beside Mem0 on the same LoCoMo turns and questions.

Both systems ingest the turns of the LoCoMo conversations (all 10; 2 with ``--quick``) in the
same run, then answer every question that has evidence, taking turns question by question, and
are scored by ``eval locomo``'s oracle: evidence recall@5 and @10 of the top 10 hits among the
conversation's turns.

- memstack (:mod:`.memstack_side`): the path of ``eval locomo``'s hybrid search, the product's
  default ranking; turns through Kafka, stores rebuilt from the log.
- Mem0 (:mod:`.mem0_side`): mem0ai with ``infer=False`` (no LLM is reachable), its local Qdrant
  and its BM25 keyword leg, the same MiniLM weights, in two embedder configurations; its
  headline figures are its best per figure (:mod:`.figures`).

Figures per system: recall@5/@10, ingest turns/s (start-up included), search p50/p99 (the
query's encoding included); ``recall_lead@10``, ``ingest_ratio`` (= ``ratio``) and
``search_p50_ratio``. The JSON line also carries ``notes``: how each system ran, which Mem0
configuration gave each headline figure, and the goals (recall lead >= 0.2, ingest >= 5x,
search p50 <= Mem0's). Mem0 is the optional extra ``memstack[peers]``; without it the bench
says so and stops.
"""

from __future__ import annotations

from memstack.jobs.bench.peers.runner import compare
from memstack.jobs.eval.locomo_data import load
from memstack.jobs.measure import Report, Result


def run(quick: bool, report: Report) -> Result:
    return compare(load(2 if quick else None), report)
