"""The live worker's forget position moves only past requests it applied.

``eval faults`` found it (disk-full nemesis): the DuckDB erase of a session forget failed with
ENOSPC, yet the ledger's offset was counted as handled, so the service's applied position
covered the forget and two reads ``after=`` its position answered the forgotten text during the
seconds the failing worker took to stop. Now a failed request leaves the position where it was
(a read after it waits, then 504) and the worker stops; on restart it applies it again.

Real stores and the real model; the processor that fails stands in for a full disk (a unit test
of the worker's bookkeeping: the disk-full behaviour itself is exercised by ``eval faults``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from memstack.foundation.builders import Defaults, EventBuilder
from memstack.operators.log import LogPosition
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.forgetting.bundle import ForgetStores
from memstack.pipelines.forgetting.in_worker import LiveForgetting
from memstack.pipelines.forgetting.ledger import ForgetLedger
from memstack.pipelines.forgetting.processor import ForgetProcessor
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.projector import StoreProjector
from memstack.pipelines.stores.bundle import Stores

TOPIC = "t.forget"


class DiskFull:
    """A processor whose logical phase fails as DuckDB's commit did on a full disk."""

    def __init__(self, stores: ForgetStores) -> None:
        self.stores = stores
        self.extra: list[object] = []
        self.lineage = None

    def hide_all(self, requests: object, exclusive: object) -> None:
        raise OSError(28, "No space left on device")


def request_record(offset: int) -> LogRecord:
    builder = EventBuilder(Defaults(tenant="t0", agent="a", source="test"))
    event = builder.forget({"type": "session", "session": "s1"}, reason="test")
    position = LogPosition(datetime(2026, 12, 1, tzinfo=UTC), 0, offset)
    return LogRecord(TOPIC, b"t0/_forget", event.model_dump_json().encode(), position, 1)


def live_forgetting(directory: Path, minilm: MiniLMEncoder) -> tuple[LiveForgetting, Stores]:
    stores = Stores.open(directory)
    ledger = ForgetLedger()
    projector = StoreProjector(stores, minilm, "t.events", forgotten=ledger)

    def failing(fs: ForgetStores) -> ForgetProcessor:
        return DiskFull(fs)  # type: ignore[return-value]

    return LiveForgetting(directory, projector, ledger, failing), stores


def test_a_failed_request_leaves_the_position_and_a_tombstone_moves_it(
        tmp_path: Path, minilm: MiniLMEncoder) -> None:
    forgetting, _ = live_forgetting(tmp_path / "s", minilm)
    with pytest.raises(OSError, match="No space left"):
        forgetting.apply(request_record(4))
    assert forgetting.next_offsets == {}  # a read after= offset 5 must wait for the retry
    assert forgetting.projector.stores.events.counts()  # the stores are still open

    tombstone = LogRecord(TOPIC, b"t0/_forget", None, LogPosition(
        datetime(2026, 12, 1, tzinfo=UTC), 1, 7), 1)
    assert forgetting.apply(tombstone) is None  # not a request: handled, nothing to do
    assert forgetting.next_offsets == {1: 8}
    forgetting.projector.stores.close()
