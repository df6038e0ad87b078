"""The demo: emit a sample conversation through the SDK and read it back from the log."""

from __future__ import annotations

import logging

from memstack.client import MemoryClient
from memstack.pipelines.log_reader import end_offsets, read_bounded
from memstack.schemas.events import parse_event
from memstack.schemas.ids import uuid7
from memstack.settings import Settings
from memstack.jobs.sample import sample_conversation

log = logging.getLogger(__name__)


def main(settings: Settings | None = None) -> int:
    settings = settings or Settings.from_env()
    session = f"demo-{uuid7().hex[:12]}"
    before = end_offsets(settings.bootstrap, settings.events_topic)
    print(f"1. emitting a sample conversation as session {session} to {settings.events_topic}")
    with MemoryClient(tenant="demo", agent="planner", settings=settings) as client:
        events = sample_conversation(client, session)
        client.flush()
    for e in events:
        print(f"   sent {e.kind.value:<14} {e.event_id}  {(e.text() or '')[:60]}")
    print("2. reading the new records back from the log")
    ids = {e.event_id for e in events}
    back = []
    for rec in read_bounded(settings.bootstrap, settings.events_topic, start=before):
        if rec.value is None:
            continue
        event = parse_event(rec.value)
        if event.event_id in ids:
            back.append((rec, event))
    for rec, event in back:
        pos = rec.position
        print(f"   p{pos.partition}@{pos.offset:<5} logged {pos.log_time:%H:%M:%S.%f} "
              f"{event.kind.value:<14} {event.event_id}")
    same = [rec.value for rec, _ in back] == [e.to_json() for e in events]
    print(f"3. {len(back)}/{len(events)} events read back; byte-identical and in session order: "
          f"{'yes' if same else 'NO'}")
    return 0 if same else 1
