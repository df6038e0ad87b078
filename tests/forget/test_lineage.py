"""The log's lineage against the real broker: read once, then only what is new; shared between
threads; envelopes only (no payload text kept in memory)."""

from __future__ import annotations

import dataclasses
import threading

from memstack.client import MemoryClient
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.jobs.forget import log_lineage
from memstack.pipelines.forgetting.lineage import LogEntry


def test_lineage_reads_what_is_new_and_is_shared_between_threads(topics: Settings) -> None:
    keys = FileKeyStore(topics.keys_dir)
    with MemoryClient("acme", "helper", settings=topics, keys=keys) as client:
        first = [client.note("s1", f"note {i} of the first burst") for i in range(5)]
        client.flush()
    with MemoryClient("other", "helper", settings=topics, keys=keys) as client:
        client.note("s9", "a note of another tenant")
        client.flush()

    lineage = log_lineage(topics, keys)
    assert sorted(e.subject.event_id for e in lineage.entries("acme")) == sorted(
        e.event_id for e in first)
    assert lineage.refresh() == 0  # nothing new: nothing read again

    with MemoryClient("acme", "helper", settings=topics, keys=keys) as client:
        later = [client.note("s2", f"note {i} of the second burst") for i in range(3)]
        client.flush()
    found: list[list[LogEntry]] = []
    threads = [threading.Thread(target=lambda: found.append(lineage.entries("acme")))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = {e.event_id for e in first + later}
    for entries in found:  # each thread saw every event once: no entry read twice
        assert sorted(e.subject.event_id for e in entries) == sorted(want)
    assert lineage.refresh() == 0
    assert len(lineage.entries("other")) == 1
    lineage.close()  # a closed lineage opens a new consumer and goes on where it was
    assert len(lineage.entries("acme")) == len(want) and lineage.refresh() == 0

    # the payloads are sealed with live keys: opened to read their subjects, never kept
    entry = lineage.entries("acme")[0]
    assert entry.state == "sealed"
    assert {f.name for f in dataclasses.fields(entry)} == {"subject", "position", "state"}
