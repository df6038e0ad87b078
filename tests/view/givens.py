"""A hand-worked bitemporal scenario, projected into real stores by the real projector.

Valid times are in 2024 (``V(m, d)``); log (transaction) times in 2025 (``K(m, d)``).

Partition 0, tenant ``acme``, session ``s1`` (subject ``ana``, relation ``lives_in``):

====  ========  ==================================================  =====================
 off  log time  event                                               valid from
====  ========  ==================================================  =====================
  0   K(1,10)   fact ana lives_in Lisbon                            V(1,1)
  1   +1 s      note "Ana lives in Lisbon, in a flat near the river" V(1,1)
  2   K(2,10)   fact ana lives_in Porto                             V(2,1)
  3   +1 s      note "Ana moved to Porto"                           V(2,1)
  4   K(3,10)   fact ana lives_in Braga  (the correction)           V(2,1)
  5   +1 s      note "Correction: Ana moved to Braga, not Porto"   V(2,1)
  6   K(4,10)   fact ana lives_in Faro   (the late fact)            V(1,15)
  7   +1 s      note "Ana had lived in Faro since mid-January"      V(1,15)
====  ========  ==================================================  =====================

Partition 1, tenant ``acme``, session ``s2``: off 0 at K(2,5) fact bob works_at Acme (V(1,1)),
off 1 a message "Bob started working at Acme". Partition 2, tenant ``other``, session ``s1``:
off 0 at K(1,10) fact ana lives_in Tokyo (V(1,1)), off 1 note "Ana lives in Tokyo".

The versions of (acme, ana, lives_in), worked by hand (vt, tt as offsets of partition 0):

- v1 Lisbon vt [Jan 1, open)   tt [0, 2)
- v2 Lisbon vt [Jan 1, Feb 1)  tt [2, 6)
- v3 Porto  vt [Feb 1, open)   tt [2, 4)
- v4 Braga  vt [Feb 1, open)   tt [4, -)
- v5 Lisbon vt [Jan 1, Jan 15) tt [6, -)
- v6 Faro   vt [Jan 15, Feb 1) tt [6, -)   (the late fact's portion ends at Porto/Braga's start)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.operators.log import LogPosition
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.bundle import Stores
from memstack.schemas.events import Event

TOPIC = "view-test.events"


def V(month: int, day: int) -> datetime:
    return datetime(2024, month, day, tzinfo=UTC)


def K(month: int, day: int, seconds: int = 0) -> datetime:
    return datetime(2025, month, day, tzinfo=UTC) + timedelta(seconds=seconds)


def _events(tenant: str, session: str) -> EventBuilder:
    return EventBuilder(Defaults(tenant=tenant, agent="helper", source="test"))


def scenario() -> list[tuple[Event, LogPosition]]:
    """Every event of the scenario with its log position."""
    a = _events("acme", "s1")
    o = _events("other", "s1")
    placed: list[tuple[Event, LogPosition]] = []

    def put(event: Event, when: datetime, partition: int) -> None:
        offset = sum(1 for _, p in placed if p.partition == partition)
        placed.append((event, LogPosition(when, partition, offset)))

    for (city, vt, kt, text) in (
        ("Lisbon", V(1, 1), K(1, 10), "Ana lives in Lisbon, in a flat near the river"),
        ("Porto", V(2, 1), K(2, 10), "Ana moved to Porto"),
        ("Braga", V(2, 1), K(3, 10), "Correction: Ana moved to Braga, not Porto"),
        ("Faro", V(1, 15), K(4, 10), "Ana had lived in Faro since mid-January"),
    ):
        put(a.fact("s1", "ana", "lives_in", city, valid_from=vt, occurred_at=kt), kt, 0)
        put(a.note("s1", text, subject="ana", occurred_at=vt), kt + timedelta(seconds=1), 0)
    put(a.fact("s2", "bob", "works_at", "Acme", valid_from=V(1, 1), occurred_at=K(2, 5)),
        K(2, 5), 1)
    put(a.message("s2", "user", "Bob started working at Acme", subject="bob",
                  occurred_at=V(1, 1)), K(2, 5, 1), 1)
    put(o.fact("s1", "ana", "lives_in", "Tokyo", valid_from=V(1, 1), occurred_at=K(1, 10)),
        K(1, 10), 2)
    put(o.note("s1", "Ana lives in Tokyo", subject="ana", occurred_at=V(1, 1)),
        K(1, 10, 1), 2)
    return placed


def project(directory: Path, placed: list[tuple[Event, LogPosition]], encoder: Encoder) -> None:
    """Write the events into fresh stores at ``directory`` with the live projector."""
    records = [LogRecord(TOPIC, e.key, e.to_json(), pos, 1) for e, pos in placed]
    with Stores.open(directory) as stores:
        projector = StoreProjector(stores, encoder, TOPIC)
        projector.commit(projector.prepare(records))
        stores.vectors.maintain(force=True)
