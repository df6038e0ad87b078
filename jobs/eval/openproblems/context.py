"""Open problem 4: the weights' and the session state's read-outs in ``context()``.

The conversations go through Kafka (a private broker on free loopback ports unless
``MEMSTACK_BOOTSTRAP`` names one) and the stores are rebuilt from the log, as in
``memstack eval locomo`` (messages, and session observations as notes). Each conversation is a
session of tenant ``locomo``; its session state (the live default: small sums and the code
ring) is built by the live updater's own ``recompute`` from what the stores hold for it (every
text record, key = value = its stored vector, at its log position) and read through the real
:class:`~memstack.view.state.SessionStateReader`; its consolidated turns are the learner the
Ray actor streamed (:class:`~memstack.view.recall.RecalledTurns`).

For every question, ``context(question, BUDGET, session=conversation)`` is assembled twice:
``without`` = the default sources, ``with`` = the default sources plus the state (share 0.15)
and the weights (share 0.25), the defaults shrinking to leave them room. Recall = the share of
the question's evidence turns among the turns the context's items stand for (a note counts as
the turns it cites, as in ``eval locomo``). ``BUDGET`` = 512 tokens holds about ten turns.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.jobs.eval.locomo import TENANT, events_of
from memstack.jobs.eval.openproblems.data import Stream
from memstack.jobs.measure import Report
from memstack.operators.consolidation import RidgeLearner
from memstack.operators.session_state import StateConfig
from memstack.operators.session_state.codec import snapshot_sums
from memstack.operators.session_state.codes import RingConfig
from memstack.operators.session_state.keys import turn_texts
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.session_state.table import SessionStateUpdater, StateItem, session_key
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event
from memstack.view import MemoryView
from memstack.view.context import ContextSource, default_sources
from memstack.view.recall import RecalledTurns
from memstack.view.state import DictSource, SessionStateReader, SessionStateSource

BUDGET = 512


@contextmanager
def stores_from_log(events: Sequence[Event], encoder: Encoder, report: Report
                    ) -> Iterator[Stores]:
    """Emit ``events`` to fresh topics, rebuild stores from the log, yield them read-only."""
    from memstack.infra.net import admin_client, free_port_pair
    from memstack.jobs.bench.broker_env import broker_for
    from memstack.pipelines.rebuild import rebuild

    with tempfile.TemporaryDirectory(prefix="memstack-op-") as tmp:
        settings = Settings.from_env().with_(topic_prefix=f"eval-op-{uuid.uuid4().hex[:8]}")
        if settings.bootstrap == Settings().bootstrap:  # no broker named: a private one
            port, controller = free_port_pair()
            settings = settings.with_(home=Path(tmp), kafka_port=port, controller_port=controller,
                                      bootstrap=f"127.0.0.1:{port}")
        with broker_for(settings) as ready:
            with MemoryClient(TENANT, "eval", settings=ready) as client:
                client.emit_confirmed(list(events))
            done = rebuild(ready.bootstrap, ready.events_topic, Path(tmp) / "stores",
                           encoder=encoder, keys=FileKeyStore(ready.keys_dir))
            report("rebuilt stores from the log: %d events in %.1f s", done.events, done.seconds)
            try:
                with Stores.open(Path(tmp) / "stores", read_only=True) as stores:
                    yield stores
            finally:
                with admin_client(ready.bootstrap) as admin:
                    admin.delete_topics([ready.events_topic, ready.forget_topic,
                                         ready.dlq_topic], raise_errors=False)


class _NoSink:
    """The updater's sink and source for :meth:`SessionStateUpdater.recompute`, which neither
    writes nor reads snapshots."""

    def get(self, key: str) -> bytes | None:
        return None

    def send(self, partition: int, key: str, value: bytes | None) -> None:
        raise RuntimeError("recompute writes no snapshot")

    async def flush(self) -> None:
        return None


def state_snapshot(stores: Stores, session: str, config: StateConfig, encoder: Encoder,
                   ring: RingConfig | None) -> bytes:
    """The session's state built from its stored text records by the live updater's
    ``recompute`` (what the updater adds for them, at their log positions)."""
    rows = [r for r in stores.events.records(TENANT, session=session) if r.text]
    vectors = np.asarray(stores.vectors.vectors_of([r.event_id for r in rows]), dtype=np.float32)
    items = []
    for r, v in zip(rows, vectors, strict=True):
        texts = turn_texts(r.text)
        assert texts is not None
        items.append(StateItem(r.event_id, TENANT, session, r.partition, r.offset,
                               r.tt.timestamp(), texts, v))
    updater = SessionStateUpdater(_NoSink(), _NoSink(), encoder, config=config, ring=ring,
                                  capacity=1)
    return snapshot_sums(updater.recompute(items)[session_key(TENANT, session)])


def measure(data: Sequence[Stream], learners: Mapping[str, RidgeLearner], encoder: Encoder,
            config: StateConfig, ring: RingConfig | None, report: Report, *,
            ablations: bool = True) -> dict[str, list[float]]:
    """Per question, the evidence recall of ``context()`` without and with the read-outs (and,
    with ``ablations``, with each read-out alone)."""
    events, cites = events_of([s.conversation for s in data])
    with stores_from_log(events, encoder, report) as stores:
        snaps = {session_key(TENANT, s.name): state_snapshot(stores, s.name, config, encoder, ring)
                 for s in data}
        reader = SessionStateReader(stores, encoder, DictSource(snaps))
        state = SessionStateSource(reader)
        weights = RecalledTurns(lambda _tenant, session: learners.get(session), encoder)
        variants: dict[str, list[ContextSource]] = {
            "without": default_sources(), "with": default_sources([state, weights]),
            "with_state": default_sources([state]), "with_weights": default_sources([weights])}
        if not ablations:
            variants = {k: v for k, v in variants.items() if k in ("with", "without")}
        out: dict[str, list[float]] = {name: [] for name in variants}
        views = {name: MemoryView(TENANT, stores, encoder=encoder, context_sources=sources)
                 for name, sources in variants.items()}
        for s in data:
            for a in s.asked:
                wanted = {s.conversation.turns[i].dia_id for i in a.evidence}
                for name, view in views.items():
                    ctx = view.context(a.question.question, BUDGET, session=s.name)
                    got = {t for item in ctx.items if item.event_id
                           for t in cites.get(item.event_id, ())}
                    out[name].append(len(wanted & got) / len(wanted))
            report("context: %s done (%d questions)", s.name, len(s.asked))
    return out
