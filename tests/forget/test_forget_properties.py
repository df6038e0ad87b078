"""Property: after random forget requests over a random stream, no query at any (valid, known)
returns forgotten content, and the stores equal a clean build that never saw it.

Pure store logic is under test here, so the embeddings come from :class:`HashEncoder`, a
deterministic cheap test encoder (text -> seeded unit vector); the integration tests and the
evaluation use the real model.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstack.operators.forget import ForgetRequest
from memstack.operators.log import LoggedEvent, LogPosition
from memstack.operators.memory import MemoryOperator
from memstack.operators.mutations import PutMemory
from memstack.pipelines.forgetting import ForgetProcessor, ForgetStores, StaticLineage
from memstack.pipelines.stores.base import Vectors
from memstack.pipelines.stores.lance_index import IndexPolicy
from memstack.schemas.events import ForgetScope
from memstack.schemas.ids import uuid7
from tests.forget.reference import covered_ids
from tests.pipelines.helpers import at, builder, logged

TENANTS, SESSIONS, SUBJECTS = ("a", "b"), ("s1", "s2", "s3"), (None, "u1", "u2")
RELATIONS, OBJECTS = ("lives_in", "likes"), ("Lisbon", "Porto", "Faro")


class HashEncoder:
    """Test-only: a unit vector seeded by the text's hash (same text, same vector)."""

    name, dim = "hash-test", 384

    def encode(self, texts: Sequence[str]) -> Vectors:
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest())
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)


@st.composite
def streams(draw: st.DrawFn) -> list[LoggedEvent]:
    n = draw(st.integers(3, 14))
    out = []
    for i in range(n):
        b = builder(draw(st.sampled_from(TENANTS)))
        session, subject = draw(st.sampled_from(SESSIONS)), draw(st.sampled_from(SUBJECTS))
        if subject and draw(st.booleans()):
            event = b.fact(session, subject, draw(st.sampled_from(RELATIONS)),
                           draw(st.sampled_from(OBJECTS)), occurred_at=at(i))
        else:
            event = b.note(session, f"note {i} {draw(st.sampled_from(OBJECTS))} zq{i:03d}x",
                           occurred_at=at(i), subject=subject)
        out.append(logged(event, i))
    return out


@st.composite
def requests(draw: st.DrawFn, events: list[LoggedEvent]) -> list[ForgetRequest]:
    out = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["event", "session", "subject", "tenant", "fact"]))
        scope: dict[str, str] = {"type": kind}
        if kind == "event":
            scope["event_id"] = draw(st.sampled_from(events)).event.event_id
        elif kind == "session":
            scope["session"] = draw(st.sampled_from(SESSIONS))
        elif kind in ("subject", "fact"):
            scope["subject"] = draw(st.sampled_from(SUBJECTS[1:]))
        if kind == "fact":
            scope["relation"] = draw(st.sampled_from(RELATIONS))
        tt = draw(st.integers(0, len(events) + 2))
        out.append(ForgetRequest(str(uuid7()), draw(st.sampled_from(TENANTS)),
                                 ForgetScope.model_validate(scope),
                                 LogPosition(at(tt), 1, tt)))
    return out


def build(directory: Path, events: list[LoggedEvent], encoder: HashEncoder) -> ForgetStores:
    stores = ForgetStores(directory, policy=IndexPolicy(vector_min_rows=1_000_000))
    mutations = MemoryOperator().apply_batch(events)
    stores.duckdb.index.apply(mutations, {}, topic="t")
    rows = [m.row for m in mutations if isinstance(m, PutMemory)]
    if rows:
        stores.lance.index.merge(rows, encoder.encode([r.text for r in rows]))
    return stores


def hashes(stores: ForgetStores) -> dict[str, str]:
    return {k: v for k, v in stores.stores.content_hashes().items() if k != "offsets"}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_forgotten_never_answers_and_the_rest_is_a_clean_build(data: st.DataObject) -> None:
    events = data.draw(streams())
    reqs = data.draw(requests(events))
    gone = frozenset().union(*(covered_ids(r, events) for r in reqs))
    enc = HashEncoder()
    with tempfile.TemporaryDirectory() as tmp:
        with build(Path(tmp) / "forgot", events, enc) as stores:
            processor = ForgetProcessor(stores, lineage=StaticLineage(events), encoder=enc)
            for r in reqs:
                assert processor.apply(r).audit.passed
            assert_nothing_answers(stores, events, gone)
            forgot = hashes(stores)
        kept = [e for e in events if e.event.event_id not in gone]
        with build(Path(tmp) / "clean", kept, enc) as clean:
            assert forgot == hashes(clean)


def assert_nothing_answers(stores: ForgetStores, events: list[LoggedEvent],
                           gone: frozenset[str]) -> None:
    s = stores.stores
    times = [e.position.log_time for e in events] + [None]
    for tenant in TENANTS:
        for tt in times:
            assert not {r.event_id for r in s.events.records(tenant, until=tt)} & gone
            for vt in times:
                facts = s.events.facts_as_of(tenant, valid=vt, known=tt)
                assert not {v.source_event_id for v in facts} & gone
        for e in events:
            if e.event.event_id in gone and (text := e.event.text()):
                hits = s.vectors.search_text(text, tenant=tenant, k=20)
                assert not {h.row.event_id for h in hits} & gone


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_requests_hidden_together_equal_the_same_requests_one_by_one(
        data: st.DataObject) -> None:
    """``hide_all`` erases disjoint requests at once and takes an overlapping one after the
    group before it: the stores, each request's rows deleted and every audit are those of
    applying the requests one at a time."""
    events = data.draw(streams())
    reqs = data.draw(requests(events)) + data.draw(requests(events))
    enc = HashEncoder()
    with tempfile.TemporaryDirectory() as tmp:
        with build(Path(tmp) / "one-by-one", events, enc) as stores:
            processor = ForgetProcessor(stores, lineage=StaticLineage(events), encoder=enc)
            alone = [processor.apply(r) for r in reqs]
            one_by_one = hashes(stores)
        with build(Path(tmp) / "together", events, enc) as stores:
            processor = ForgetProcessor(stores, lineage=StaticLineage(events), encoder=enc)
            together = processor.erase(processor.hide_all(reqs))
            assert hashes(stores) == one_by_one
    assert all(o.audit.passed for o in alone + together)
    assert ([(o.request.request_id, {r.store: r.deleted for r in o.reports}) for o in together]
            == [(o.request.request_id, {r.store: r.deleted for r in o.reports}) for o in alone])


def test_a_text_shared_only_inside_a_batch_is_audited_and_one_a_survivor_says_is_not() -> None:
    """The audit probes of a batch: the batch's rows all go, so a text that only two of its
    requests hold is searched for in both audits; one that a surviving row holds too is not."""
    said = "the harbour key is under the blue pot zq900x"
    b = builder("a")
    twice = [logged(b.note("s1", said, occurred_at=at(i)), i) for i in range(2)]
    survivor = logged(b.note("s2", said, occurred_at=at(2)), 2)
    enc = HashEncoder()
    for events, audited in ((twice, (said,)), ([*twice, survivor], ())):
        reqs = [ForgetRequest(str(uuid7()), "a",
                              ForgetScope(type="event", event_id=e.event.event_id),
                              LogPosition(at(9), 1, 9)) for e in twice]
        with tempfile.TemporaryDirectory() as tmp, build(Path(tmp), events, enc) as stores:
            processor = ForgetProcessor(stores, lineage=StaticLineage(events), encoder=enc)
            probes = processor.probes([h.resolved for h in processor.hide_all(reqs)])
            assert [p.texts for p in probes] == [audited, audited]
            assert all((p.vectors is not None) == bool(audited) for p in probes)
