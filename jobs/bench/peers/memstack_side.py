"""memstack's side of the peers bench: the path of ``memstack eval locomo``'s hybrid search.

Ingest: the conversations' turns (messages only) go through Kafka with the client
(:func:`memstack.jobs.eval.locomo.ingested`: fresh topics, ``emit_confirmed``, then the rebuild,
the live pipeline's projector, into DuckDB and LanceDB, opened read-only). The clock runs from
before the topics are made to the stores being open, so the encoder's load (a fresh encoder of
the ``MEMSTACK_ENCODER`` setting), the clients and the rebuild's start are inside it; the broker
itself is started before (a deployment's broker runs before memory does).

Search: ``MemoryView.search(question, 10, kinds=["message"], session=<conversation>)``, the
product's default ranking, the query encoded inside each call.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from memstack.jobs.bench.peers.sides import Hits, K, Side
from memstack.jobs.eval.locomo import TENANT, events_of, ingested
from memstack.jobs.eval.locomo_data import Conversation
from memstack.jobs.measure import Report
from memstack.pipelines.embedding import Encoder, make_encoder
from memstack.schemas.events import Event
from memstack.view import MemoryView


def turn_events(convs: Sequence[Conversation]) -> tuple[list[Event], dict[str, tuple[str, ...]]]:
    """The messages ``eval locomo`` emits for the turns (its notes left out: Mem0 gets the turns
    only), and per event id the turn it stands for."""
    events, cites = events_of(convs)
    turns = [e for e in events if e.kind == "message"]
    return turns, {e.event_id: cites[e.event_id] for e in turns}


class MemstackSearcher:
    def __init__(self, view: MemoryView, cites: dict[str, tuple[str, ...]]) -> None:
        self.view, self.cites = view, cites

    def search(self, question: str, conversation: str) -> Hits:
        hits = self.view.search(question, K, kinds=["message"], session=conversation)
        return [self.cites[h.event_id] for h in hits]


@contextmanager
def ingest(convs: Sequence[Conversation], report: Report,
           encoder: Encoder | None = None) -> Iterator[Side]:
    """memstack with the conversations' turns in it, searchable; its topics are deleted after.
    ``encoder``: a fresh encoder of the setting when not given (its load is timed)."""
    events, cites = turn_events(convs)
    encoder = encoder or make_encoder()
    began = time.perf_counter()
    with ingested(events, "peers", report, encoder) as done:
        seconds = time.perf_counter() - began
        report("memstack: %d turns searchable in %.1f s (%.1f turns/s, start-up included)",
               len(events), seconds, len(events) / seconds)
        view = MemoryView(TENANT, done.stores, encoder=encoder)
        yield Side("memstack", seconds, len(events), MemstackSearcher(view, cites))
