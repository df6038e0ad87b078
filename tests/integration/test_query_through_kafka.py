"""As-of queries over stores built from the real log: transaction time is the broker's.

The hand-worked case of ``tests/view/givens.py`` (a move, a correction, a late fact) is emitted
through Kafka one event at a time; the stores are rebuilt from the topic; the answers as known
at each event's log time (and at each log position) are the hand-worked ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memstack.client import MemoryClient, Written
from memstack.foundation.keystore import FileKeyStore
from memstack.foundation.settings import Settings
from memstack.pipelines.embedding import shared_encoder
from memstack.pipelines.rebuild import rebuild
from memstack.pipelines.stores.bundle import Stores
from memstack.view import MemoryView
from tests.view.givens import V

MOVES = (("Lisbon", V(1, 1)), ("Porto", V(2, 1)), ("Braga", V(2, 1)), ("Faro", V(1, 15)))


@pytest.fixture
def logged(topics: Settings, tmp_path: Path) -> tuple[Path, list[Written]]:
    written: list[Written] = []
    with MemoryClient("acme", "helper", settings=topics) as client:
        for city, valid_from in MOVES:
            fact = client.events.fact("s1", "ana", "lives_in", city, valid_from=valid_from)
            written.append(client.emit(fact).get())
            note = client.events.note("s1", f"Ana lives in {city}", subject="ana",
                                      occurred_at=valid_from)
            written.append(client.emit(note).get())
        client.emit(client.events.fact("s9", "ana", "lives_in", "Tokyo", tenant="other")).get()
    directory = tmp_path / "stores"
    rebuild(topics.bootstrap, topics.events_topic, directory, encoder=shared_encoder(),
            keys=FileKeyStore(topics.keys_dir))
    return directory, written


def test_as_of_log_times_and_positions(logged: tuple[Path, list[Written]]) -> None:
    directory, written = logged
    facts = written[0::2]
    with Stores.open(directory, read_only=True) as stores:
        ana = MemoryView("acme", stores, encoder=shared_encoder())

        def at(valid: object, known: object) -> list[str]:
            return [f.object for f in ana.as_of(valid, known).facts("ana")]  # type: ignore[arg-type]

        porto, braga, faro = facts[1], facts[2], facts[3]
        assert at(V(2, 15), porto.log_time) == ["Porto"]     # before the correction arrived
        assert at(V(2, 15), braga.log_time) == ["Braga"]
        assert at(V(1, 20), braga.log_time) == ["Lisbon"]    # before the late fact was known
        assert at(V(1, 20), faro.log_time) == ["Faro"]
        assert at(V(1, 10), faro.log_time) == ["Lisbon"]     # valid before the late fact
        partition = porto.partition
        assert at(V(2, 15), {partition: braga.offset}) == ["Porto"]      # braga not inside
        assert at(V(2, 15), {partition: braga.offset + 1}) == ["Braga"]
        assert len(ana.history("ana")) == 6
        texts = [r.text for r in ana.as_of(known=braga.log_time).records("s1")]
        assert texts == ["Ana lives in Lisbon", "Ana lives in Porto"]
        porto_note = written[3]  # emitted after the Porto fact: known from its own log time
        hits = ana.as_of(V(2, 15), porto_note.log_time).search("Ana lives in Braga", 10)
        assert sorted(h.memory.text for h in hits) == ["Ana lives in Lisbon",
                                                       "Ana lives in Porto"]
        assert "Tokyo" not in {f.object for f in ana.facts()}
