"""The demo: emit a sample conversation, run the live pipeline, then ask memory as of time.

1. emit ten events through the SDK (messages, a tool call and result, facts that change);
2. read them back from the log: byte-identical, in session order;
3. run the live worker until it has caught up (Faust -> DuckDB + LanceDB + session state);
4. query the stores: records, facts as of different valid and known times, hybrid search.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from memstack.client import MemoryClient
from memstack.jobs.run import RunOptions, run_live
from memstack.jobs.sample import sample_conversation
from memstack.operators.log import LogPosition
from memstack.pipelines.log_reader import end_offsets, read_bounded
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event, parse_event
from memstack.schemas.ids import uuid7
from memstack.settings import Settings

log = logging.getLogger(__name__)


def main(settings: Settings | None = None) -> int:
    settings = settings or Settings.from_env()
    session = f"demo-{uuid7().hex[:12]}"
    events = _emit(settings, session)
    logged = _read_back(settings, events)
    if logged is None:
        return 1
    options = RunOptions(until_caught_up=True, within_s=0.1)
    print(f"3. running the live pipeline until caught up (stores: {options.stores_dir(settings)})")
    code = run_live(settings, options)
    if code != 0:
        print(f"   the live worker failed (exit {code}); see the log above")
        return code
    _query(settings, options, session, events, logged)
    return 0


def _emit(settings: Settings, session: str) -> list[Event]:
    print(f"1. emitting a sample conversation as session {session} to {settings.events_topic}")
    with MemoryClient(tenant="demo", agent="planner", settings=settings) as client:
        events = sample_conversation(client, session)
        client.flush()
    for e in events:
        print(f"   sent {e.kind.value:<14} {e.event_id}  {(e.text() or '')[:60]}")
    return events


def _read_back(settings: Settings, events: list[Event]) -> dict[str, LogPosition] | None:
    print("2. reading the new records back from the log")
    ids = {e.event_id for e in events}
    start = {p: max(0, end - 200) for p, end in end_offsets(
        settings.bootstrap, settings.events_topic).items()}
    back = [(r, parse_event(r.value)) for r in read_bounded(
        settings.bootstrap, settings.events_topic, start=start) if r.value is not None]
    mine = [(r, e) for r, e in back if e.event_id in ids]
    same = [r.value for r, _ in mine] == [e.to_json() for e in events]
    print(f"   {len(mine)}/{len(events)} events read back; byte-identical and in session order: "
          f"{'yes' if same else 'NO'}")
    return {e.event_id: r.position for r, e in mine} if same else None


def _query(settings: Settings, options: RunOptions, session: str, events: list[Event],
           logged: dict[str, LogPosition]) -> None:
    from memstack.view import MemoryView

    with Stores.open(options.stores_dir(settings), read_only=True) as stores:
        view = MemoryView("demo", stores)
        records = view.records(session)
        print(f"4. {len(records)} raw records of the session in DuckDB, "
              f"{stores.vectors.count()} memory rows in LanceDB (all sessions)")
        for when in (datetime(2026, 3, 15, tzinfo=UTC), datetime(2026, 4, 15, tzinfo=UTC)):
            facts = view.as_of(valid=when).facts(subject="user:ana", relation="lives_in")
            print(f"   where does Ana live, valid {when:%Y-%m-%d}: {[f.object for f in facts]}")
        move = logged[events[7].event_id]  # the log position of "Ana lives in Porto"
        cut = {**end_offsets(settings.bootstrap, settings.events_topic),
               move.partition: move.offset}  # known: everything before that event
        old = view.as_of(valid=datetime(2026, 4, 15, tzinfo=UTC), known=cut)
        print(f"   ... and as known before the move was mentioned: "
              f"{[f.object for f in old.facts(subject='user:ana', relation='lives_in')]}")
        for hit in view.search("a flat close to the market in Porto", k=3, session=session):
            print(f"   search hit #{hit.rank} (fused {hit.score.fused:.4f}): "
                  f"{hit.memory.text[:70]}")
