"""Replay with PyFlink against the real broker: the replayed stores equal the simple rebuild's.

Pure pieces (points, ordering, progress, the source DDL, the forget scopes) are tested first,
without a broker. The PyFlink tests share one JVM (one pytest process) and are marked slow.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memstack.client import MemoryClient
from memstack.foundation.builders import Defaults, EventBuilder
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.jobs.sample import sample_conversation
from memstack.operators.forget import ForgetRequest
from memstack.operators.log import LogPosition
from memstack.pipelines.forgetting.ledger import ForgetLedger
from memstack.pipelines.log_reader import end_offsets, read_bounded
from memstack.pipelines.replay.bounds import (
    AtOffsets,
    AtTime,
    Bounds,
    Earliest,
    End,
    parse_point,
)
from memstack.pipelines.replay.errors import BadPointError
from memstack.pipelines.replay.ordering import FIRST, PartitionLinker, Resequencer
from memstack.pipelines.replay.progress import Progress, ProgressTracker
from memstack.pipelines.replay.source import offsets_option, source_ddl
from memstack.schemas.events import ForgetScope
from memstack.view import AsOfView, MemoryView
from tests.conftest import KafkaUnderTest, settings_on_fresh_topics

B = EventBuilder(Defaults("acme", "helper"))


# -- pure pieces ---------------------------------------------------------------------------

def test_parse_point_forms() -> None:
    assert parse_point("earliest") == Earliest()
    assert parse_point("end") == End()
    assert parse_point("0:42,2:7") == AtOffsets({0: 42, 2: 7})
    assert parse_point("2026-03-02T09:00:00Z") == AtTime(datetime(2026, 3, 2, 9, tzinfo=UTC))
    for bad in ("yesterday", "2026-03-02T09:00:00", "0:x", "-1:3"):
        with pytest.raises(BadPointError):
            parse_point(bad)


def test_resequencer_restores_partition_order_across_sessions() -> None:
    # partition 0 holds offsets 0, 1, 3, 4 (2 is a transaction marker); sessions interleave.
    linker = PartitionLinker()
    links = [(o, linker.link(0, o)) for o in (0, 1, 3, 4)]
    assert links == [(0, FIRST), (1, 0), (3, 1), (4, 3)]
    seq: Resequencer[int] = Resequencer()
    out: list[int] = []
    for offset, prev in (links[2], links[0], links[3], links[1]):  # arrival order scrambled
        out.extend(seq.push(0, prev, offset, offset))
    assert out == [0, 1, 3, 4]
    assert seq.pending() == 0


def test_progress_rate_eta_and_stall() -> None:
    bounds = Bounds("t", {0: 0, 1: 10}, {0: 100, 1: 110})
    tr = ProgressTracker(bounds, started=0.0, stall_after_s=30, startup_grace_s=5)
    tr.update(Progress({0: 50, 1: 10}, 50, 0, 0, 1), now=10.0)
    tr.update(Progress({0: 100, 1: 10}, 100, 0, 0, 2), now=20.0)
    assert tr.done() == 100 and tr.rate(20.0) == pytest.approx(5.0)
    assert tr.eta_s(20.0) == pytest.approx(20.0)
    assert tr.stalled(20.0) == []
    assert tr.stalled(41.0) == [1]  # partition 1 never moved; partition 0 is done
    assert any("partition 1" in line for line in tr.render(41.0))


def test_source_ddl_is_bounded_by_explicit_offsets() -> None:
    ddl = source_ddl("ev", "127.0.0.1:1", Bounds("x.events", {0: 3, 1: 0}, {0: 9, 1: 4}))
    assert offsets_option({1: 4, 0: 9}) == "partition:0,offset:9;partition:1,offset:4"
    assert "'scan.bounded.specific-offsets' = 'partition:0,offset:9;partition:1,offset:4'" in ddl
    assert "'scan.startup.specific-offsets' = 'partition:0,offset:3;partition:1,offset:0'" in ddl
    assert "METADATA FROM 'offset'" in ddl and "METADATA FROM 'timestamp'" in ddl


def _ledger(tenant: str, scope: ForgetScope) -> ForgetLedger:
    at = LogPosition(datetime(2030, 1, 1, tzinfo=UTC), 0, 0)
    return ForgetLedger([ForgetRequest("r1", tenant, scope, at)])


def test_forget_scopes() -> None:
    """The replay's ledger (the projector's ForgetFilter) applies the operators' scope rule."""
    fact = B.fact("s1", "user:ana", "lives_in", "Lisbon")
    msg = B.message("s2", "user", "hi", subject="user:bob")
    f = _ledger("acme", ForgetScope(type="fact", subject="user:ana", relation="lives_in"))
    assert f.covers(fact) and not f.covers(msg)
    assert _ledger("acme", ForgetScope(type="session", session="s2")).covers(msg)
    assert not _ledger("other", ForgetScope(type="tenant")).covers(msg)


# -- PyFlink against the broker -------------------------------------------------------------

def _emit_log(settings: Settings, sessions: int) -> int:
    events = []
    for i in range(sessions):
        events += sample_conversation(B, f"s{i}")
    # a late fact with an earlier valid time, so versions are re-cut in the replay as well
    events.append(B.fact("s0", "user:ana", "lives_in", "Faro",
                         valid_from=datetime(2020, 1, 1, tzinfo=UTC),
                         occurred_at=datetime(2026, 3, 3, tzinfo=UTC)))
    with MemoryClient("acme", "helper", settings=settings) as client:
        client.emit_confirmed(events)
    return len(events)


@pytest.fixture(scope="module")
def replay_log(kafka: KafkaUnderTest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    settings = settings_on_fresh_topics(kafka, tmp_path_factory.mktemp("replay-home"),
                                        "t-replay")
    _emit_log(settings, sessions=8)
    yield settings


def _reference(settings: Settings, into: Path, stop: dict[int, int] | None = None) -> Path:
    from memstack.pipelines.rebuild import rebuild

    rebuild(settings.bootstrap, settings.events_topic, into, stop=stop, batch=50,
            keys=FileKeyStore(settings.keys_dir))
    return into


def _replay(settings: Settings, into: Path, stop: str = "end", **kw: object) -> object:
    from memstack.pipelines.replay.job import ReplaySpec, run_replay

    spec = ReplaySpec(into=into, start=Earliest(), stop=parse_point(stop),
                      work_dir=into.parent / "flink", commit_batch=32, embed_batch=16,
                      **kw)  # type: ignore[arg-type]
    before = dict(os.environ)
    result = run_replay(spec, settings)
    # PyFlink's loopback worker sets ~40 variables in this process (one forbids any later job
    # here or in a child); the replay leaves the environment as it found it.
    assert dict(os.environ) == before
    return result


def _live(settings: Settings, into: Path) -> Path:
    """The live worker (Faust, a child process) run over the log until caught up."""
    from memstack.jobs.run import spawn_worker

    worker = spawn_worker(settings, into, "--until-caught-up", log_path=into.parent / "live.log")
    assert worker.wait(timeout=240) == 0, (into.parent / "live.log").read_text()[-3000:]
    return into


def _answers(view: AsOfView) -> tuple[set[tuple[str, str, str]], list[tuple[str, str]]]:
    """The facts and the records (in order) a view answers."""
    facts = {(f.subject, f.relation, f.object) for f in view.facts()}
    records = [(r.session, r.event_id) for r in view.records()]
    return facts, records


@pytest.mark.slow
def test_replay_equals_live_then_mid_log_as_known_then_catch_up(replay_log: Settings,
                                                                tmp_path: Path) -> None:
    from memstack.pipelines.replay.verify import compare
    from memstack.pipelines.stores.bundle import Stores

    settings = replay_log
    end = end_offsets(settings.bootstrap, settings.events_topic)
    live = _live(settings, tmp_path / "live")
    full_ref = _reference(settings, tmp_path / "ref-full")
    assert compare(full_ref, live).equal  # the one-process rebuild agrees with live too

    # 1. full replay, two parallel prepare subtasks in worker processes: equal to live
    _replay(settings, tmp_path / "replay-full", parallelism=2, worker_mode="process")
    cmp_full = compare(live, tmp_path / "replay-full")
    assert cmp_full.equal, cmp_full.lines()

    # 2. up to mid-log offsets (prepare stage keyed by session this time): equal to the
    # rebuild stopped there, and every as-of answer equals the live stores' answer as known
    # at that log cut. The cut is the first half of the log in transaction-time order (append
    # time, partition, offset), so it holds a transaction-time prefix of every fact key's
    # entries (user:ana's are spread over the partitions): what "as known at a cut" is exact
    # for (docs/queries.md, "Facts at a log cut"). Halving each partition's offsets is not
    # such a cut, and answers then depend on how the partitions' append times interleaved.
    log = sorted((r.position.log_time, r.position.partition, r.position.offset)
                 for r in read_bounded(settings.bootstrap, settings.events_topic))
    mid = dict.fromkeys(end, 0)
    for _, partition, offset in log[:len(log) // 2]:
        mid[partition] = max(mid[partition], offset + 1)
    assert sum(mid.values()) == len(log) // 2  # each partition's part is a prefix of it
    mid_text = ",".join(f"{p}:{o}" for p, o in mid.items())
    mid_ref = _reference(settings, tmp_path / "ref-mid", stop=mid)
    _replay(settings, tmp_path / "replay-mid", stop=mid_text, worker_mode="loopback",
            prepare_key="session")
    cmp_mid = compare(mid_ref, tmp_path / "replay-mid")
    assert cmp_mid.equal, cmp_mid.lines()
    assert not compare(live, tmp_path / "replay-mid").equal
    with Stores.open(live, read_only=True) as a, \
            Stores.open(tmp_path / "replay-mid", read_only=True) as b:
        applied = {p: o for p, o in mid.items() if o}  # a partition with nothing is not stored
        assert b.events.applied_offsets(settings.events_topic) == applied
        live_view, mid_view = MemoryView("acme", a), MemoryView("acme", b)
        cut_changed = False
        for vt in (datetime(2019, 6, 1, tzinfo=UTC), datetime(2026, 3, 2, 12, tzinfo=UTC),
                   datetime(2026, 5, 1, tzinfo=UTC), None):
            as_known = _answers(live_view.as_of(valid=vt, known=mid))
            assert as_known == _answers(mid_view.as_of(valid=vt)) and as_known[0], vt
            cut_changed |= as_known != _answers(live_view.as_of(valid=vt))
        assert cut_changed  # the cut matters: the live stores know more than the mid replay

    # 3. the same directory caught up to the end: equals live
    _replay(settings, tmp_path / "replay-mid", worker_mode="loopback")
    assert compare(live, tmp_path / "replay-mid").equal


@pytest.mark.slow
def test_a_mixed_log_replays_equal_to_the_rebuild(kafka: KafkaUnderTest, tmp_path: Path) -> None:
    """A log written unsealed (MEMSTACK_SEAL=0, or before sealing was the default) and then
    sealed: the PyFlink replay and the one-process rebuild open both and agree."""
    from memstack.pipelines.replay.verify import compare
    from memstack.pipelines.stores.bundle import Stores
    from memstack.schemas.events import Event
    from memstack.schemas.sealed import parse_record

    settings = settings_on_fresh_topics(kafka, tmp_path / "home", "t-replay-mixed")
    with MemoryClient("acme", "helper", settings=settings.with_(seal=False)) as client:
        for i in range(3):
            client.message(f"s{i}", "user", f"plain turn {i}")
        client.fact("s0", "user:ana", "lives_in", "Porto")
    with MemoryClient("acme", "helper", settings=settings) as client:
        for i in range(3):
            client.message(f"s{i}", "user", f"sealed turn {i}")
        client.fact("s1", "user:ana", "lives_in", "Lisbon")
    kinds = [isinstance(parse_record(r.value or b""), Event)
             for r in read_bounded(settings.bootstrap, settings.events_topic)]
    assert kinds.count(True) == 4 and kinds.count(False) == 4  # plain and sealed

    reference = _reference(settings, tmp_path / "ref")
    _replay(settings, tmp_path / "replayed", worker_mode="loopback")
    verdict = compare(reference, tmp_path / "replayed")
    assert verdict.equal, verdict.lines()
    with Stores.open(tmp_path / "replayed", read_only=True) as stores:
        texts = sorted(r.text or "" for r in stores.events.records("acme"))
        assert texts == sorted([f"plain turn {i}" for i in range(3)]
                               + [f"sealed turn {i}" for i in range(3)])
        assert [f.object for f in MemoryView("acme", stores).facts(subject="user:ana")] == [
            "Lisbon"]


@pytest.mark.slow
def test_replay_after_forget_rebuilds_nothing_forgotten(kafka: KafkaUnderTest,
                                                        tmp_path: Path) -> None:
    """Sealed events, a session forget (its keys destroyed), then a PyFlink replay from
    offset 0 into a new directory: the forgotten session's content is not rebuilt, the other
    session is, and an event of the forgotten session logged after the request is new data."""
    import time

    from memstack.pipelines.stores.bundle import Stores

    settings = settings_on_fresh_topics(kafka, tmp_path / "home", "t-replay-forget")
    secret = "the safe in the attic opens with 4-19-33"
    keys = FileKeyStore(settings.keys_dir)
    with MemoryClient("acme", "helper", settings=settings, keys=keys) as client:
        for i in range(3):
            client.message("s-keep", "user", f"remind me to call the plumber on day {i}")
        client.message("s-gone", "user", secret)
        client.fact("s-gone", "user:ana", "hides_key_in", "the attic")
        client.forget({"type": "session", "session": "s-gone"}, reason="asked")
        client.flush()
        time.sleep(0.01)  # log times are milliseconds; a tie with the request is covered
        later = client.message("s-gone", "user", "new plans after the forget")

    _replay(settings, tmp_path / "replayed", worker_mode="loopback")
    with Stores.open(tmp_path / "replayed", read_only=True) as stores:
        assert [r.event_id for r in stores.events.records("acme", session="s-gone")] == [
            later.event_id]
        assert len(stores.events.records("acme", session="s-keep")) == 3
        assert stores.events.fact_history("acme", "user:ana") == []
    assert secret.encode() not in (tmp_path / "replayed" / "memstack.duckdb").read_bytes()
